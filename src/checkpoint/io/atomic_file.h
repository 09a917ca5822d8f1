#pragma once
#include <cstddef>
#include <string>

namespace rankwise::checkpoint::io {

/// A file published atomically and durably: bytes go to a temporary file in
/// the same directory; commit() fsyncs it, renames it over the target and
/// fsyncs the directory (POSIX rename is atomic; fsync(2) notes that the
/// directory needs its own fsync). Destroying an uncommitted AtomicFile
/// removes the temporary file, so the target is never torn or half-written.
/// Every failure is a CheckpointError naming the target, the step and errno;
/// it ignores SIGXFSZ (util::ignore_file_size_signal), so `ulimit -f` is one.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  /// Appends bytes. Starts the disk write-back of full 64 MiB ranges early
  /// (sync_file_range) so that commit()'s fsync has little left to do.
  void write(const void* data, std::size_t size);
  /// Bytes written so far.
  std::size_t size() const { return written_; }
  /// fsync, rename over the target, fsync the directory.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& step, int error);

  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  std::size_t written_ = 0;
  std::size_t flushed_ = 0;
  bool committed_ = false;
};

/// Writes `size` bytes to `path` with an AtomicFile.
void write_file_atomically(const std::string& path, const char* data, std::size_t size);

/// fsyncs the directory `dir`, which makes a rename or creation inside it
/// durable (fsync(2), NOTES). Best effort: a directory that cannot be opened is skipped.
void fsync_directory(const std::string& dir);

/// `path` without trailing slashes ("/" stays "/").
std::string without_trailing_slash(std::string path);

/// The directory part of `path` ("." when it has none).
std::string directory_of(const std::string& path);

/// Reads a whole (small) file. Throws CheckpointError naming the path when it fails.
std::string read_file(const std::string& path);

}  // namespace rankwise::checkpoint::io
