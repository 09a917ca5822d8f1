#include "checkpoint/detail/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "rankwise/error.h"

namespace rankwise::detail {
std::string directory_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

namespace {

[[noreturn]] void fail(const std::string& step, const std::string& path, int error) {
  throw CheckpointError("rankwise: checkpoint write of '" + path + "' failed at " + step + ": " +
                        std::strerror(error) +
                        ". Check that the directory exists, is writable and has free space; "
                        "the previous checkpoint at this path is untouched");
}

}  // namespace

void write_file_atomically(const std::string& path, const char* data, std::size_t size) {
  const std::string dir = directory_of(path);
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + ".XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail("creating a temporary file in '" + dir + "'", path, errno);
  auto cleanup = [&](const std::string& step, int error) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(step, path, error);
  };
  std::size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, data + written, size - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      cleanup("write", errno);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) cleanup("fchmod", errno);
  if (::fsync(fd) != 0) cleanup("fsync", errno);
  if (::close(fd) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    fail("close", path, error);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    fail("rename", path, error);
  }
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // make the rename itself durable (fsync(2), NOTES)
    ::close(dir_fd);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw CheckpointError("rankwise: cannot open checkpoint '" + path + "': " +
                          std::strerror(errno) + ". Check the path");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace rankwise::detail
