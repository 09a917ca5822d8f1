#include "util/crc32.h"

#if RANKWISE_CRC32_ISAL
#include <isa-l/crc.h>
#endif
#include <zlib.h>

namespace rankwise::util {

uint32_t crc32_update(uint32_t crc, const void* data, std::size_t size) {
  if (size == 0) return crc;
#if RANKWISE_CRC32_ISAL
  return crc32_gzip_refl(crc, static_cast<const unsigned char*>(data), size);
#else
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), size));
#endif
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
