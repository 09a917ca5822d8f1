#pragma once
// File-descriptor I/O that retries on EINTR and short transfers: whole lines
// in one write() where the kernel allows (lines of several threads or
// processes on one pipe are not torn apart), and whole reads for the
// checkpoint readers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rankwise::util {

/// Writes `text` to `fd` as it is (no newline added), e.g. a progress bar's
/// "\r..." update. Errors are ignored: this is how the library reports, not
/// what it reports.
void write_text(int fd, std::string_view text);

/// Writes `line` and "\n" to `fd` in one write_text(); errors are ignored.
void write_line(int fd, const std::string& line);

/// Writes all of `text` to `fd` (retrying on EINTR and short writes).
/// Returns false, errno set, when a write fails; what went before stays.
bool write_all(int fd, std::string_view text);

/// Why a write failed, for a message: strerror(`error`), and for EFBIG
/// under a file size limit, the limit and how to raise it (`ulimit -f`).
std::string write_error_text(int error);
/// Whether `error` is EFBIG under this process's file size limit.
bool hit_file_size_limit(int error);

/// Makes a write past the file size limit (RLIMIT_FSIZE) fail with EFBIG
/// instead of SIGXFSZ killing the process: sets SIGXFSZ to ignored, once,
/// process-wide, unless the program set its own disposition. Called before
/// rankwise writes a file (docs/checkpoints.md#a-file-size-limit).
void ignore_file_size_signal();

/// Writes `text` to `path`.part, then renames it to `path`, so that a reader
/// sees the old file or the whole new one. Not fsynced: for files that need
/// not survive a crash. Returns false (errno set) when a step fails.
bool write_then_rename(const std::string& path, const std::string& text);

/// The names in directory `dir` (with "." and ".."); empty when it cannot be read.
std::vector<std::string> list_directory(const std::string& dir);

/// Reads up to `size` bytes of `fd` at `offset` into `buffer`. Returns the
/// bytes read: fewer than `size` only when the file ends first. Throws
/// std::system_error (errno) on a read error.
std::size_t pread_all(int fd, void* buffer, std::size_t size, uint64_t offset);

}  // namespace rankwise::util
