#pragma once
// CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320: the CRC of zip, gzip,
// PNG and zlib's crc32()), at memory speed: Intel ISA-L's crc32_gzip_refl
// (PCLMULQDQ / AVX-512 folding, chosen at run time), which gives the same
// values as zlib's crc32() at several times its speed (10.7 vs 1.4 GB/s on
// one core of the 2-core CI machine). A build without ISA-L (not found at
// configure) uses zlib's crc32_z: the same values, slower.
//
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78: the CRC of iSCSI,
// ext4 and TFRecord files such as TensorBoard's): ISA-L's crc32_iscsi (SSE4.2
// crc32 instructions) where ISA-L is found, else a table, one byte at a time.
#include <cstddef>
#include <cstdint>

namespace rankwise::util {

/// The CRC-32 of `size` bytes at `data` continuing `crc` (0 to start), as
/// zlib's crc32(crc, data, size).
uint32_t crc32_update(uint32_t crc, const void* data, std::size_t size);

/// The CRC-32C of `size` bytes at `data` continuing `crc` (0 to start), with
/// the same conventions as crc32_update: CRC-32C("123456789") = 0xE3069283.
uint32_t crc32c_update(uint32_t crc, const void* data, std::size_t size);

/// "ISA-L" or "zlib": which implementation this build uses (for CRC-32C,
/// "zlib" means the table fallback: zlib has no CRC-32C).
const char* crc32_implementation();

/// The CRC-32 of A followed by B, from crc(A), crc(B) and B's length (zlib's
/// crc32_combine).
uint32_t crc32_combine_lengths(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

}  // namespace rankwise::util
