#include "checkpoint/detail/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "detail/host_name.h"
#include "rankwise/error.h"

namespace rankwise::detail {
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
    throw CheckpointError("rankwise: cannot create the lock file '" + lock_path + "' for " + what +
                          ": " + std::strerror(errno) +
                          ". Check that the directory exists and is writable");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      throw CheckpointError(
          "rankwise: " + what + " is being written by " + holder + " (lock '" + lock_path +
          "'); refusing to write it concurrently. Two runs (or ranks that bypass rank-0 saving) "
          "are saving to the same path: give each run its own checkpoint path, or call the save "
          "on every rank of one process group (after rankwise::init) so that rank 0 alone locks");
    }
    throw CheckpointError("rankwise: cannot lock '" + lock_path + "' for " + what + ": " +
                          std::strerror(error));
  }
  const std::string me = std::to_string(::getpid()) + "@" + host_name() + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    (void)!::pwrite(fd_, me.data(), me.size(), 0);
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace rankwise::detail
