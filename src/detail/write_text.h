#pragma once
// Bytes to a file descriptor as they are (no newline added), in a single
// write() where the kernel allows: a progress bar's "\r..." update.
#include <string_view>

namespace rankwise {
namespace detail {

/// Writes `text` to `fd`, retrying on EINTR and short writes; errors are
/// ignored, as in write_line() (which uses it).
void write_text(int fd, std::string_view text);

}  // namespace detail
}  // namespace rankwise
