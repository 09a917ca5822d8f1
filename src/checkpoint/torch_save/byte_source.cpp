#include "checkpoint/torch_save/byte_source.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "core/check.h"
#include "rankwise/error.h"
#include "util/crc32.h"
#include "util/io.h"

namespace rankwise::checkpoint::torch_save {

void read_exactly(int fd, void* buffer, std::size_t size, uint64_t offset, const std::string& path) {
  std::size_t done = 0;
  try {
    done = util::pread_all(fd, buffer, size, offset);
  } catch (const std::system_error& e) {
    core::raise<CheckpointError>("reading checkpoint '{}' failed: {}", path,
                                 std::strerror(e.code().value()));
  }
  if (done < size) {
    core::raise<CheckpointError>("reading checkpoint '{}' failed: unexpected end of file", path);
  }
}

namespace {

// CRC-32 of [begin, end) of the file, read in 1 MiB chunks: each is
// checksummed while it is still in the core's cache.
uint32_t crc_of_range(int fd, uint64_t begin, uint64_t end, const std::string& path) {
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<unsigned char> buffer(std::min<uint64_t>(kChunk, end - begin));
  uint32_t crc = 0;
  for (uint64_t at = begin; at < end;) {
    const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(buffer.size(), end - at));
    read_exactly(fd, buffer.data(), n, at, path);
    crc = util::crc32_update(crc, buffer.data(), n);
    at += n;
  }
  return crc;
}

}  // namespace

uint32_t crc_of_file_prefix(int fd, uint64_t end, const std::string& path) {
  const uint64_t half = end / 2;
  uint32_t second = 0;
  std::exception_ptr second_error;
  std::thread worker([&] {
    try {
      second = crc_of_range(fd, half, end, path);
    } catch (...) {
      second_error = std::current_exception();
    }
  });
  uint32_t first = 0;
  std::exception_ptr first_error;
  try {
    first = crc_of_range(fd, 0, half, path);
  } catch (...) {
    first_error = std::current_exception();
  }
  worker.join();
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
  return util::crc32_combine_lengths(first, second, end - half);
}

void MemorySource::read(void* buffer, std::size_t n, uint64_t offset) const {
  if (offset > size() || n > size() - offset) {
    core::raise<CheckpointError>("reading checkpoint '{}' failed: unexpected end of data", path());
  }
  std::memcpy(buffer, bytes_.data() + offset, n);
}

uint32_t MemorySource::crc_of_prefix(uint64_t end) const {
  return util::crc32_update(0, bytes_.data(), static_cast<std::size_t>(end));
}

}  // namespace rankwise::checkpoint::torch_save
