#pragma once
/// A stored zip's central directory, read from its end (PKWARE's
/// APPNOTE.TXT 4.3.12-4.3.16, zip64 included): each entry's name, method,
/// stored size, recorded CRC-32 and local header offset. Shared by the
/// tensor-record parser (tensor_record.h) and the damage locator
/// (damage.h).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rankwise::checkpoint::torch_save {

/// Reads `size` bytes at `offset`; throws when it cannot.
using RecordReader = std::function<std::string(int64_t offset, int64_t size)>;

/// One entry of the central directory.
struct ZipEntry {
  std::string name;
  uint16_t method = 0;       ///< 0: stored
  uint64_t size = 0;         ///< bytes of its data as stored
  uint32_t crc32 = 0;        ///< the CRC-32 the directory records for its data
  uint64_t local_offset = 0; ///< bytes: its local header
};

struct ZipDirectory {
  int64_t length = 0; ///< bytes of the zip, its end record last
  int64_t begin = 0;  ///< bytes: the central directory's first byte
  std::vector<ZipEntry> entries;
};

/// Reads the end record (the last 22 bytes of the `length` bytes `read`
/// gives; a zip comment after it is not looked at) and the central
/// directory. Calls `bad(why)`, which must throw, when they are damaged.
ZipDirectory read_zip_directory(const RecordReader& read, int64_t length,
                                const std::function<void(const std::string&)>& bad);

/// The first byte of `e`'s data, after its local header; calls `bad(why)`
/// when the entry is compressed, has no local header or reaches into the
/// directory.
int64_t zip_entry_data_begin(const RecordReader& read, const ZipDirectory& dir, const ZipEntry& e,
                             const std::function<void(const std::string&)>& bad);

}  // namespace rankwise::checkpoint::torch_save
