#pragma once
// pread(2) until `size` bytes or the end of the file, for the checkpoint readers.
#include <cstddef>
#include <cstdint>

namespace rankwise::detail {

/// Reads up to `size` bytes of `fd` at `offset` into `buffer`, retrying on
/// EINTR and short reads. Returns the bytes read: fewer than `size` only when
/// the file ends first. Throws std::system_error (errno) on a read error.
std::size_t pread_all(int fd, void* buffer, std::size_t size, uint64_t offset);

}  // namespace rankwise::detail
