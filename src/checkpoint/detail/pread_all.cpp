#include "checkpoint/detail/pread_all.h"

#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace rankwise::detail {

std::size_t pread_all(int fd, void* buffer, std::size_t size, uint64_t offset) {
  auto* out = static_cast<char*>(buffer);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category());
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

}  // namespace rankwise::detail
