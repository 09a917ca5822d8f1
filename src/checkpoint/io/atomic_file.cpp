#include "checkpoint/io/atomic_file.h"

#include "core/check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "checkpoint/io/fault_injection.h"
#include "rankwise/error.h"
#include "util/io.h"

namespace rankwise::checkpoint::io {

namespace {
constexpr std::size_t kWritebackChunk = std::size_t{64} << 20;
}  // namespace

std::string without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string directory_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  util::ignore_file_size_signal();  // past `ulimit -f`: EFBIG, a CheckpointError, not SIGXFSZ
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + ".XXXXXX";
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) {
    int error = errno;
    tmp_.clear();
    fail("creating a temporary file in '" + directory_of(path_) + "'", error);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& step, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  const char* advice = util::hit_file_size_limit(error)
                           ? ""
                           : " Check that the directory exists, is writable and has free space.";
  core::raise<CheckpointError>(
      "checkpoint write of '{}' failed at {}: {}.{} Nothing was replaced: the last good checkpoint "
      "is as it was",
      path_, step, util::write_error_text(error), advice);
}

void AtomicFile::write(const void* data, std::size_t size) {
  const char* bytes = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd_, bytes + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    done += static_cast<std::size_t>(n);
    written_ += static_cast<std::size_t>(n);
    fault_after_bytes(written_);
  }
  if (written_ - flushed_ >= kWritebackChunk) {
    // Start writing this range to disk now (Linux; a hint, errors surface at fsync).
    ::sync_file_range(fd_, static_cast<off_t>(flushed_), static_cast<off_t>(written_ - flushed_),
                      SYNC_FILE_RANGE_WRITE);
    flushed_ = written_;
  }
}

void AtomicFile::commit() {
  fault_at("before-fsync");
  if (::fchmod(fd_, 0644) != 0) fail("fchmod", errno);
  if (::fsync(fd_) != 0) fail("fsync", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close", errno);
  }
  fd_ = -1;
  fault_at("before-rename");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename", errno);
  committed_ = true;
  fault_at("before-dir-fsync");
  fsync_directory(directory_of(path_));  // make the rename itself durable
}

void fsync_directory(const std::string& dir) {
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::string& path, const char* data, std::size_t size) {
  AtomicFile file(path);
  file.write(data, size);
  file.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    core::raise<CheckpointError>("cannot open checkpoint '{}': {}. Check the path", path,
                                 std::strerror(errno));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace rankwise::checkpoint::io
