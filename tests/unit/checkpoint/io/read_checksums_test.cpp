// ReadChecksums (src/checkpoint/io/read_checksums.h): a file's CRC-32
// assembled from the reads a parser made, whatever their order, overlaps
// and gaps, equal to zlib's crc32 of the bytes.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/io/read_checksums.h"

namespace {

using rankwise::checkpoint::io::ReadChecksums;

std::string file_of(std::size_t size) {
  std::string bytes(size, '\0');
  uint32_t x = 12345;
  for (auto& b : bytes) {
    x = x * 1103515245u + 12345u;
    b = static_cast<char>(x >> 24);
  }
  return bytes;
}

uint32_t zlib_crc(const std::string& bytes, std::size_t end) {
  return static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(end)));
}

struct Read {
  uint64_t offset;
  std::size_t size;
};

}  // namespace

TEST(ReadChecksums, AnyPatternOfReadsGivesTheCrcOfThePrefix) {
  const std::string file = file_of((3 << 20) + 777);
  const std::size_t end = file.size() - 34;  // a trailer after `end`, as in a checkpoint
  const std::vector<std::vector<Read>> patterns = {
      {},                                                    // nothing read: all read at the end
      {{0, file.size()}},                                    // one read past `end`: not counted
      {{0, end}},                                            // exactly the prefix, in 1 MiB pieces
      {{file.size() - 56, 56}, {100, 30}, {100, 30}, {0, 4096}, {5000, (2 << 20) + 3}},  // tail, repeats, gaps
      {{10, 1 << 20}, {5, 100}, {(1 << 20) + 10, 7}, {end - 1, 1}, {0, 0}},  // overlaps, last byte, empty
  };
  for (std::size_t p = 0; p < patterns.size(); ++p) {
    int reads_of_the_file = 0;
    ReadChecksums sums([&](void* buffer, std::size_t n, uint64_t offset) {
      ++reads_of_the_file;
      std::memcpy(buffer, file.data() + offset, n);
    }, end);
    for (const Read& r : patterns[p]) {
      std::string got(r.size, '\0');
      sums.read(got.data(), r.size, r.offset);
      EXPECT_EQ(got, file.substr(r.offset, r.size)) << "pattern " << p;
    }
    const auto assembled = sums.crc();
    EXPECT_EQ(assembled.crc, zlib_crc(file, end)) << "pattern " << p;
    EXPECT_TRUE(assembled.consistent) << "pattern " << p;
    EXPECT_GT(reads_of_the_file, 0);
  }
}

TEST(ReadChecksums, AFailedReadPassesItsErrorAndLeavesNoPieceBehind) {
  const std::string file = file_of(5 << 20);
  bool fail = true;
  const auto read_at = [&](void* buffer, std::size_t n, uint64_t offset) {
    if (fail && offset >= (3u << 20)) throw std::runtime_error("disk error at " + std::to_string(offset));
    std::memcpy(buffer, file.data() + offset, n);
  };
  {
    ReadChecksums sums(read_at, file.size());
    {
      std::vector<char> buffer(file.size());
      EXPECT_THROW(sums.read(buffer.data(), buffer.size(), 0), std::runtime_error);
    }  // the buffer is freed here: both threads must be done with it
    EXPECT_THROW(sums.crc(), std::runtime_error);  // the unread bytes fail to read too
    fail = false;
    EXPECT_EQ(sums.crc().crc, zlib_crc(file, file.size()));  // the pieces read before count, the rest is read
  }
  ReadChecksums sums(read_at, 3u << 20);
  std::vector<char> buffer(3u << 20);
  sums.read(buffer.data(), buffer.size(), 0);  // a later read works as before
  EXPECT_EQ(sums.crc().crc, zlib_crc(file, 3u << 20));
}

TEST(ReadChecksums, ReadsPastTheEndCountOnlyTheirBytesBeforeIt) {
  const std::string file = file_of(4096);
  ReadChecksums sums([&](void* buffer, std::size_t n, uint64_t offset) {
    std::memcpy(buffer, file.data() + offset, n);
  }, 4000);
  std::string got(200, '\0');
  sums.read(got.data(), 200, 3896);  // 104 bytes before the end, 96 after
  EXPECT_EQ(sums.crc().crc, zlib_crc(file, 4000));
}

TEST(ReadChecksums, TheSameBytesReadTwiceDifferentlyAreInconsistent) {
  std::string file = file_of(4096);
  ReadChecksums sums([&](void* buffer, std::size_t n, uint64_t offset) {
    std::memcpy(buffer, file.data() + offset, n);
  }, file.size());
  std::string got(100, '\0');
  sums.read(got.data(), 100, 1000);
  sums.read(got.data(), 100, 1000);
  EXPECT_TRUE(sums.crc().consistent);
  file[1050] ^= 1;  // written in place between two reads
  sums.read(got.data(), 100, 1000);
  EXPECT_FALSE(sums.crc().consistent);
}
