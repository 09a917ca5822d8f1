// util::crc32_update gives zlib's crc32() values, with ISA-L or with its
// zlib fallback (the same file built without ISA-L is the binary
// crc32_zlib_tests), and split updates combine; util::crc32c_update gives
// the CRC-32C check values (RFC 3720's, and crcmod's "crc-32c" for long
// buffers), with ISA-L or with its table fallback.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <vector>

#include "util/crc32.h"

TEST(Crc32, EqualsZlibForEveryLengthAndAlignment) {
  std::vector<unsigned char> bytes(70000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + (i >> 7));
  for (std::size_t offset : {0, 1, 3, 7}) {
    for (std::size_t length : {0, 1, 2, 15, 16, 17, 63, 64, 65, 255, 4096, 65537}) {
      const auto* data = bytes.data() + offset;
      const auto expected = static_cast<uint32_t>(crc32_z(0, data, length));
      EXPECT_EQ(rankwise::util::crc32_update(0, data, length), expected)
          << "offset " << offset << " length " << length;
      const std::size_t half = length / 3;
      const uint32_t split = rankwise::util::crc32_update(
          rankwise::util::crc32_update(0, data, half), data + half, length - half);
      EXPECT_EQ(split, expected) << "split at " << half << " of " << length;
      const uint32_t combined = rankwise::util::crc32_combine_lengths(
          rankwise::util::crc32_update(0, data, half),
          rankwise::util::crc32_update(0, data + half, length - half), length - half);
      EXPECT_EQ(combined, expected) << "combined at " << half << " of " << length;
    }
  }
  // The check value of CRC-32/ISO-HDLC (the zip and gzip CRC).
  const char check[] = "123456789";
  EXPECT_EQ(rankwise::util::crc32_update(0, check, 9), 0xCBF43926u);
}

TEST(Crc32c, KnownVectors) {
  using rankwise::util::crc32c_update;
  EXPECT_EQ(crc32c_update(0, "123456789", 9), 0xE3069283u);  // the catalogue's check value
  EXPECT_EQ(crc32c_update(0, "", 0), 0u);
  // RFC 3720 (iSCSI), appendix B.4: 32 zeros, 32 0xFF, 0..31, 31..0.
  std::vector<unsigned char> bytes(32, 0);
  EXPECT_EQ(crc32c_update(0, bytes.data(), 32), 0x8A9136AAu);
  bytes.assign(32, 0xFF);
  EXPECT_EQ(crc32c_update(0, bytes.data(), 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c_update(0, bytes.data(), 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c_update(0, bytes.data(), 32), 0x113FDB5Cu);
}

TEST(Crc32c, LongBuffersAndSplitUpdates) {
  using rankwise::util::crc32c_update;
  std::vector<unsigned char> bytes(70000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + (i >> 7));
  // Python: crcmod.predefined.mkCrcFun("crc-32c") of the same bytes.
  EXPECT_EQ(crc32c_update(0, bytes.data(), bytes.size()), 0xDB4C360Eu);
  EXPECT_EQ(crc32c_update(0, bytes.data() + 3, 65537), 0x81F5F81Eu);
  for (std::size_t half : {0, 1, 7, 4096, 65536}) {
    EXPECT_EQ(crc32c_update(crc32c_update(0, bytes.data() + 3, half), bytes.data() + 3 + half, 65537 - half),
              0x81F5F81Eu)
        << "split at " << half;
  }
}

TEST(Crc32, TheImplementationIsTheOneConfigured) {
  EXPECT_STREQ(rankwise::util::crc32_implementation(), RANKWISE_CRC32_EXPECTED);
}
