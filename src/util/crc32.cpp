#include "util/crc32.h"

#if RANKWISE_CRC32_ISAL
#include <isa-l/crc.h>
#endif
#include <zlib.h>

#include <algorithm>
#include <array>

namespace rankwise::util {

#if !RANKWISE_CRC32_ISAL
namespace {

// CRC-32C's byte table (reflected polynomial 0x82F63B78).
constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}();

}  // namespace
#endif

uint32_t crc32_update(uint32_t crc, const void* data, std::size_t size) {
  if (size == 0) return crc;
#if RANKWISE_CRC32_ISAL
  return crc32_gzip_refl(crc, static_cast<const unsigned char*>(data), size);
#else
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), size));
#endif
}

uint32_t crc32c_update(uint32_t crc, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t state = ~crc;  // the register before the final inversion
#if RANKWISE_CRC32_ISAL
  // crc32_iscsi(buffer, len, init) returns the register without the final
  // inversion, and takes an int length.
  while (size > 0) {
    const std::size_t chunk = std::min<std::size_t>(size, std::size_t{1} << 30);
    state = crc32_iscsi(const_cast<unsigned char*>(bytes), static_cast<int>(chunk), state);
    bytes += chunk;
    size -= chunk;
  }
#else
  for (std::size_t i = 0; i < size; ++i) state = kCrc32cTable[(state ^ bytes[i]) & 0xFF] ^ (state >> 8);
#endif
  return ~state;
}

const char* crc32_implementation() {
#if RANKWISE_CRC32_ISAL
  return "ISA-L";
#else
  return "zlib";
#endif
}

uint32_t crc32_combine_lengths(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(length_b)));
}

}  // namespace rankwise::util
