// write_torch_save_archive (src/checkpoint/torch_save/archive.h): the
// streamed torch.save archive behind rankwise::checkpoint::save and the sharded records.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "checkpoint/torch_save/archive.h"
#include "rankwise/error.h"

namespace {

using rankwise::checkpoint::torch_save::ByteSink;
using rankwise::checkpoint::torch_save::StorageWriter;
using rankwise::checkpoint::torch_save::WrittenArchive;
using rankwise::checkpoint::torch_save::storage_from_memory;
using rankwise::checkpoint::torch_save::write_torch_save_archive;

uint32_t zlib_crc(const std::string& bytes, std::size_t begin, std::size_t size) {
  return static_cast<uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + begin), static_cast<uInt>(size)));
}

uint16_t le16(const std::string& bytes, std::size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(bytes[at]) |
                               static_cast<unsigned char>(bytes[at + 1]) << 8);
}

}  // namespace

TEST(TorchSaveArchive, PartsCoverTheArchiveInOrderWithTheirZlibCrcs) {
  // Storages of 0 bytes, 3 bytes, and 1 MiB + 5 bytes (two pieces of storage_from_memory).
  std::string big((1 << 20) + 5, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  const std::string small = "abc";
  std::string out;
  const ByteSink sink = [&](const char* d, std::size_t n) { out.append(d, n); };
  const WrittenArchive a = write_torch_save_archive(
      "PICKLE", {storage_from_memory(nullptr, 0), storage_from_memory(small.data(), small.size()),
                 storage_from_memory(big.data(), big.size())},
      sink, 34);
  ASSERT_EQ(a.length, out.size());
  uint64_t at = 0;
  std::vector<int> storages;
  for (const auto& p : a.parts) {
    EXPECT_EQ(p.offset, at);
    EXPECT_EQ(p.crc32, zlib_crc(out, p.offset, p.size)) << "part at " << p.offset;
    if (p.storage >= 0) {
      storages.push_back(p.storage);
      EXPECT_EQ(p.offset % 64, 0u) << "storage data is 64-byte aligned, as PyTorch's";
    }
    at += p.size;
  }
  EXPECT_EQ(at, out.size());
  EXPECT_EQ(storages, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(a.crc32(), zlib_crc(out, 0, out.size()));
  EXPECT_EQ(out.substr(a.parts[3].offset, 3), "abc");
  EXPECT_EQ(out.substr(a.parts[5].offset, big.size()), big);
  // The end record comes last and announces the comment the caller appends.
  EXPECT_EQ(out.substr(out.size() - 22, 4), std::string("PK\x05\x06", 4));
  EXPECT_EQ(le16(out, out.size() - 2), 34);
  for (const char* name : {"archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/data/2",
                           "archive/version"}) {
    EXPECT_NE(out.find(name), std::string::npos) << name;
  }
}

TEST(TorchSaveArchive, AStorageHandingTheWrongByteCountIsAnError) {
  std::string out;
  const ByteSink sink = [&](const char* d, std::size_t n) { out.append(d, n); };
  const std::string data = "0123456789";
  for (uint64_t declared : {uint64_t{9}, uint64_t{11}}) {
    StorageWriter w{declared, [&](const ByteSink& s) {
                      s(data.data(), data.size());
                      return uint32_t{0};
                    }};
    try {
      write_torch_save_archive("P", {w}, sink);
      ADD_FAILURE() << "no error for a storage of " << declared << " bytes handing 10";
    } catch (const rankwise::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("handed 10 bytes, not its " + std::to_string(declared)),
                std::string::npos)
          << e.what();
    }
  }
}
