#pragma once
#include <string>

namespace rankwise::checkpoint::io {

/// The lock file of a managed directory, held by rank 0 for the manager's life.
inline constexpr const char* kDirectoryLockFile = "rankwise.lock";

/// An exclusive advisory lock (flock(2)) on `lock_path`, created if needed,
/// held until destruction. The kernel releases it when the process dies, even
/// by SIGKILL, so a crashed writer never blocks the next run. The holder
/// writes "pid@host" into the file so that a refused writer can name it.
class FileLock {
 public:
  /// Takes the lock without waiting. Throws CheckpointError naming `what`
  /// and the holder when another process holds it.
  FileLock(const std::string& lock_path, const std::string& what);
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  int fd_ = -1;
};

}  // namespace rankwise::checkpoint::io
