#pragma once
/// Zip record signatures and fixed sizes (PKWARE's APPNOTE.TXT, 4.3), for
/// the torch.save records rankwise writes (stored_zip.h) and reads
/// (tensor_record.h).
#include <cstddef>
#include <cstdint>
#include <string>

namespace rankwise::checkpoint::torch_save::zip {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kDataDescriptor = 0x08074b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr int64_t kLocalHeaderSize = 30;
constexpr int64_t kCentralHeaderSize = 46;
constexpr int64_t kEndSize = 22;
constexpr int64_t kLocatorSize = 20;
constexpr int64_t kZip64EndSize = 56;
/// A 4-byte field holding this (or a 2-byte field holding 0xffff) says "see the zip64 field".
constexpr uint64_t kMax32 = 0xffffffff;
constexpr uint64_t kMax16 = 0xffff;
constexpr uint16_t kZip64ExtraId = 1;

/// The little-endian unsigned field of `bytes` bytes (at most 8) at `at` in `s`.
inline uint64_t le(const std::string& s, std::size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

}  // namespace rankwise::checkpoint::torch_save::zip
