#pragma once
// CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320: the CRC of zip, gzip,
// PNG and zlib's crc32()), at memory speed: Intel ISA-L's crc32_gzip_refl
// (PCLMULQDQ / AVX-512 folding, chosen at run time), which gives the same
// values as zlib's crc32() at several times its speed (10.7 vs 1.4 GB/s on
// one core of the 2-core CI machine). A build without ISA-L (not found at
// configure) uses zlib's crc32_z: the same values, slower.
#include <cstddef>
#include <cstdint>

namespace rankwise::util {

/// The CRC-32 of `size` bytes at `data` continuing `crc` (0 to start), as
/// zlib's crc32(crc, data, size).
uint32_t crc32_update(uint32_t crc, const void* data, std::size_t size);

/// "ISA-L" or "zlib": which implementation this build uses.
const char* crc32_implementation();

/// The CRC-32 of A followed by B, from crc(A), crc(B) and B's length (zlib's
/// crc32_combine).
uint32_t crc32_combine_lengths(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

}  // namespace rankwise::util
