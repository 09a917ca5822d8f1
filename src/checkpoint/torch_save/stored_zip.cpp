#include "checkpoint/torch_save/stored_zip.h"

#include <algorithm>

#include "checkpoint/torch_save/zip_format.h"
#include "util/crc32.h"

namespace rankwise::checkpoint::torch_save {
namespace {

constexpr uint16_t kFlags = 0x0808;        // bit 3: a data descriptor follows the data; bit 11: UTF-8 names
constexpr uint16_t kZip64Version = 45;     // "version needed to extract" of zip64 (APPNOTE.TXT 4.4.3.2)
constexpr char kPaddingId[] = "FB";        // PyTorch's padding extra field

void put(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t clamp32(uint64_t value) { return std::min(value, torch_save::zip::kMax32); }

}  // namespace

std::string StoredZip::begin(const std::string& name, uint64_t size) {
  Entry e{name, cursor_, size, 0, size >= torch_save::zip::kMax32 || cursor_ >= torch_save::zip::kMax32};
  std::string extra;
  if (e.zip64) {
    std::string fields;
    if (size >= torch_save::zip::kMax32) {
      put(fields, size, 8);  // original size
      put(fields, size, 8);  // compressed size
    }
    if (cursor_ >= torch_save::zip::kMax32) put(fields, cursor_, 8);
    put(extra, torch_save::zip::kZip64ExtraId, 2);
    put(extra, fields.size(), 2);
    extra += fields;
  }
  // Padding so the data begins at a multiple of kAlignment: the "FB" field's 4 bytes, then 'Z's.
  const uint64_t start = cursor_ + torch_save::zip::kLocalHeaderSize + name.size() + extra.size() + 4;
  const uint64_t padding = (kAlignment - start % kAlignment) % kAlignment;
  extra += kPaddingId;
  put(extra, padding, 2);
  extra.append(padding, 'Z');

  std::string out;
  put(out, torch_save::zip::kLocalHeader, 4);
  put(out, e.zip64 ? kZip64Version : 0, 2);
  put(out, kFlags, 2);
  put(out, 0, 2);  // method: stored
  put(out, 0, 4);  // time, date
  put(out, 0, 4);  // CRC-32: in the data descriptor
  const uint64_t sizes = size >= torch_save::zip::kMax32 ? torch_save::zip::kMax32 : 0;  // in the zip64 field, or the data descriptor
  put(out, sizes, 4);
  put(out, sizes, 4);
  put(out, name.size(), 2);
  put(out, extra.size(), 2);
  out += name;
  out += extra;
  cursor_ += out.size() + size;
  entries_.push_back(std::move(e));
  return out;
}

std::string StoredZip::end(uint32_t crc32) {
  Entry& e = entries_.back();
  e.crc32 = crc32;
  std::string out;
  put(out, torch_save::zip::kDataDescriptor, 4);
  put(out, crc32, 4);
  put(out, e.size, e.zip64 ? 8 : 4);
  put(out, e.size, e.zip64 ? 8 : 4);
  cursor_ += out.size();
  return out;
}

std::string StoredZip::entry(const std::string& name, const std::string& data) {
  std::string out = begin(name, data.size());  // before end(): both advance the cursor
  out += data;
  out += end(util::crc32_update(0, data.data(), data.size()));
  return out;
}

std::string StoredZip::finish(uint16_t comment_length) {
  std::string out;
  const uint64_t directory_offset = cursor_;
  for (const Entry& e : entries_) {
    std::string fields;  // the zip64 values of the fields that overflow, in APPNOTE's order
    if (e.size >= torch_save::zip::kMax32) {
      put(fields, e.size, 8);
      put(fields, e.size, 8);
    }
    if (e.offset >= torch_save::zip::kMax32) put(fields, e.offset, 8);
    std::string extra;
    if (!fields.empty()) {
      put(extra, torch_save::zip::kZip64ExtraId, 2);
      put(extra, fields.size(), 2);
      extra += fields;
    }
    const uint16_t version = extra.empty() ? 0 : kZip64Version;
    put(out, torch_save::zip::kCentralHeader, 4);
    put(out, version, 2);  // made by
    put(out, version, 2);  // needed to extract
    put(out, kFlags, 2);
    put(out, 0, 2);  // method: stored
    put(out, 0, 4);  // time, date
    put(out, e.crc32, 4);
    put(out, clamp32(e.size), 4);
    put(out, clamp32(e.size), 4);
    put(out, e.name.size(), 2);
    put(out, extra.size(), 2);
    put(out, 0, 2);  // comment length
    put(out, 0, 2);  // disk
    put(out, 0, 2);  // internal attributes
    put(out, 0, 4);  // external attributes
    put(out, clamp32(e.offset), 4);
    out += e.name;
    out += extra;
  }
  const uint64_t directory_size = out.size();
  const uint64_t count = entries_.size();
  const bool zip64 = count >= torch_save::zip::kMax16 || directory_size >= torch_save::zip::kMax32 || directory_offset >= torch_save::zip::kMax32;
  if (zip64) {
    const uint64_t end64_offset = directory_offset + directory_size;
    put(out, torch_save::zip::kZip64End, 4);
    put(out, torch_save::zip::kZip64EndSize - 12, 8);  // the size of the rest of this record
    put(out, kZip64Version, 2);
    put(out, kZip64Version, 2);
    put(out, 0, 4);  // this disk
    put(out, 0, 4);  // the directory's disk
    put(out, count, 8);
    put(out, count, 8);
    put(out, directory_size, 8);
    put(out, directory_offset, 8);
    put(out, torch_save::zip::kZip64Locator, 4);
    put(out, 0, 4);  // the zip64 end record's disk
    put(out, end64_offset, 8);
    put(out, 1, 4);  // disks
  }
  put(out, torch_save::zip::kEndOfDirectory, 4);
  put(out, 0, 2);  // this disk
  put(out, 0, 2);  // the directory's disk
  put(out, zip64 ? torch_save::zip::kMax16 : count, 2);
  put(out, zip64 ? torch_save::zip::kMax16 : count, 2);
  put(out, zip64 ? torch_save::zip::kMax32 : directory_size, 4);
  put(out, zip64 ? torch_save::zip::kMax32 : directory_offset, 4);
  put(out, comment_length, 2);
  cursor_ += out.size();
  return out;
}

}  // namespace rankwise::checkpoint::torch_save
