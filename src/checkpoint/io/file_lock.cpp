#include "checkpoint/io/file_lock.h"

#include "core/check.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/host_name.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::io {
namespace {

std::string holder_of(int fd) {
  char buffer[256] = {};
  ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  std::string text = n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text.empty() ? "another process" : "process " + text;
}

}  // namespace

FileLock::FileLock(const std::string& lock_path, const std::string& what) {
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    core::raise<CheckpointError>(
        "cannot create the lock file '{}' for {}: {}. Check that the directory exists and is "
        "writable",
        lock_path, what, std::strerror(errno));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      core::raise<CheckpointError>(
          "{} is being written by {} (lock '{}'); refusing to write it concurrently. Two runs (or "
          "ranks that bypass rank-0 saving) are saving to the same path: give each run its own "
          "checkpoint path, or call the save on every rank of one process group (after "
          "rankwise::dist::init) so that rank 0 alone locks",
          what, holder, lock_path);
    }
    core::raise<CheckpointError>("cannot lock '{}' for {}: {}", lock_path, what,
                                 std::strerror(error));
  }
  const std::string me = std::to_string(::getpid()) + "@" + util::host_name() + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    (void)!::pwrite(fd_, me.data(), me.size(), 0);
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace rankwise::checkpoint::io
