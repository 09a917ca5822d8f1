#pragma once
// One line to a file descriptor in a single write() where the kernel allows
// (lines of several threads or processes on one pipe are not torn apart).
#include <string>

namespace rankwise {
namespace detail {

/// Writes `line` and "\n" to `fd`, retrying on EINTR and short writes;
/// errors are ignored (this is how the library reports, not what it reports).
void write_line(int fd, const std::string& line);

}  // namespace detail
}  // namespace rankwise
