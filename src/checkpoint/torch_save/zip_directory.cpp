#include "checkpoint/torch_save/zip_directory.h"

#include "checkpoint/torch_save/zip_format.h"

namespace rankwise::checkpoint::torch_save {
namespace {

using namespace zip;
using Bad = std::function<void(const std::string&)>;

std::string get(const RecordReader& read, int64_t length, int64_t offset, int64_t size, const Bad& bad) {
  if (offset < 0 || size < 0 || offset > length || size > length - offset) bad("a part lies outside it");
  return read(offset, size);
}

// Zip64 extra field (id 1): the 8-byte values of the fields set to
// 0xffffffff, in this order, for the central header at `at`.
void read_zip64_extra(const std::string& dir, std::size_t x, std::size_t x_end, uint64_t& uncompressed,
                      ZipEntry& e, const Bad& bad) {
  while (x + 4 <= x_end) {
    const uint64_t id = le(dir, x, 2), n = le(dir, x + 2, 2);
    if (x + 4 + n > x_end) bad("a damaged zip extra field");
    if (id == kZip64ExtraId) {
      std::size_t f = x + 4;
      auto take = [&](uint64_t& field) {
        if (field != kMax32) return;
        if (f + 8 > x + 4 + n) bad("a damaged zip64 extra field");
        field = le(dir, f, 8);
        f += 8;
      };
      take(uncompressed);
      take(e.size);
      take(e.local_offset);
    }
    x += 4 + n;
  }
}

std::vector<ZipEntry> read_entries(const std::string& dir, uint64_t count, const Bad& bad) {
  std::vector<ZipEntry> entries;
  std::size_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (at + kCentralHeaderSize > dir.size() || le(dir, at, 4) != kCentralHeader) bad("a damaged central directory");
    ZipEntry e;
    e.method = static_cast<uint16_t>(le(dir, at + 10, 2));
    e.crc32 = static_cast<uint32_t>(le(dir, at + 16, 4));
    e.size = le(dir, at + 20, 4);
    uint64_t uncompressed = le(dir, at + 24, 4);
    const std::size_t name_len = le(dir, at + 28, 2), extra_len = le(dir, at + 30, 2),
                      comment_len = le(dir, at + 32, 2);
    e.local_offset = le(dir, at + 42, 4);
    const std::size_t name_at = at + kCentralHeaderSize;
    if (name_at + name_len + extra_len + comment_len > dir.size()) bad("a damaged central directory");
    e.name = dir.substr(name_at, name_len);
    read_zip64_extra(dir, name_at + name_len, name_at + name_len + extra_len, uncompressed, e, bad);
    entries.push_back(std::move(e));
    at = name_at + name_len + extra_len + comment_len;
  }
  return entries;
}

}  // namespace

ZipDirectory read_zip_directory(const RecordReader& read, int64_t length, const Bad& bad) {
  if (length < kEndSize) bad("shorter than a zip's end record");
  const std::string end = get(read, length, length - kEndSize, kEndSize, bad);
  if (le(end, 0, 4) != kEndOfDirectory) bad("no zip end record at its end");
  uint64_t count = le(end, 10, 2), dir_size = le(end, 12, 4), dir_offset = le(end, 16, 4);
  if (count == kMax16 || dir_size == kMax32 || dir_offset == kMax32) {
    if (length < kEndSize + kLocatorSize) bad("a zip64 record without its locator");
    const std::string locator = get(read, length, length - kEndSize - kLocatorSize, kLocatorSize, bad);
    if (le(locator, 0, 4) != kZip64Locator) bad("a zip64 record without its locator");
    const uint64_t at = le(locator, 8, 8);
    if (at > static_cast<uint64_t>(length - kZip64EndSize)) bad("a zip64 end record outside it");
    const std::string end64 = get(read, length, static_cast<int64_t>(at), kZip64EndSize, bad);
    if (le(end64, 0, 4) != kZip64End) bad("a damaged zip64 end record");
    count = le(end64, 32, 8);
    dir_size = le(end64, 40, 8);
    dir_offset = le(end64, 48, 8);
  }
  if (dir_offset > static_cast<uint64_t>(length) || dir_size > static_cast<uint64_t>(length) - dir_offset) {
    bad("a central directory outside it");
  }
  ZipDirectory d;
  d.length = length;
  d.begin = static_cast<int64_t>(dir_offset);
  d.entries = read_entries(get(read, length, d.begin, static_cast<int64_t>(dir_size), bad), count, bad);
  return d;
}

int64_t zip_entry_data_begin(const RecordReader& read, const ZipDirectory& dir, const ZipEntry& e, const Bad& bad) {
  if (e.method != 0) bad("entry '" + e.name + "' is compressed");
  if (e.local_offset > static_cast<uint64_t>(dir.begin)) bad("entry '" + e.name + "' lies outside it");
  const std::string header = get(read, dir.length, static_cast<int64_t>(e.local_offset), kLocalHeaderSize, bad);
  if (le(header, 0, 4) != kLocalHeader) bad("entry '" + e.name + "' has no local header");
  const int64_t begin = static_cast<int64_t>(e.local_offset) + kLocalHeaderSize +
                        static_cast<int64_t>(le(header, 26, 2)) + static_cast<int64_t>(le(header, 28, 2));
  if (begin > dir.begin || e.size > static_cast<uint64_t>(dir.begin - begin)) {
    bad("entry '" + e.name + "' reaches into the central directory");
  }
  return begin;
}

}  // namespace rankwise::checkpoint::torch_save
