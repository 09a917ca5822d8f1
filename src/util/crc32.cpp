#include "util/crc32.h"

#include <isa-l/crc.h>
#include <zlib.h>

namespace rankwise::util {

uint32_t crc32_update(uint32_t crc, const void* data, std::size_t size) {
  if (size == 0) return crc;
  return crc32_gzip_refl(crc, static_cast<const unsigned char*>(data), size);
}

uint32_t crc32_combine_lengths(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(length_b)));
}

}  // namespace rankwise::util
