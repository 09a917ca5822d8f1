#pragma once
/// A zip archive of stored (uncompressed) entries written front to back, as
/// libtorch's PyTorchStreamWriter writes torch.save's records
/// (caffe2/serialize/inline_container.cc, with miniz): every entry's data
/// begins at a multiple of 64 bytes of the archive (padding in an extra
/// field "FB" of the local header); the local header's CRC-32 and sizes are
/// 0 and a data descriptor after the data holds them (flag bit 3), so an
/// entry's data can be written before its CRC-32 is known; names are UTF-8
/// (flag bit 11); times are 0. Sizes and offsets of 2^32 - 1 or more go into
/// zip64 extra fields (APPNOTE.TXT 4.5.3), and then the archive ends with
/// zip64 end records. The caller writes the bytes the methods return, in
/// order, then each entry's data between begin() and end().
#include <cstdint>
#include <string>
#include <vector>

namespace rankwise::checkpoint::torch_save {

class StoredZip {
 public:
  /// Bytes every entry's data is aligned to (PyTorch's kFieldAlignment).
  static constexpr uint64_t kAlignment = 64;

  /// The local header of entry `name` whose data, `size` bytes, the caller writes next.
  std::string begin(const std::string& name, uint64_t size);
  /// The data descriptor of the entry begun last, whose data had CRC-32 `crc32` (zlib's crc32).
  std::string end(uint32_t crc32);
  /// A whole entry: begin(), `data`, end().
  std::string entry(const std::string& name, const std::string& data);
  /// The central directory and end records: the archive's last bytes, but
  /// for a comment of `comment_length` bytes that the caller may write after
  /// them (APPNOTE.TXT 4.3.16; zip readers skip it).
  std::string finish(uint16_t comment_length = 0);

 private:
  struct Entry {
    std::string name;
    uint64_t offset = 0;  // of its local header
    uint64_t size = 0;
    uint32_t crc32 = 0;
    bool zip64 = false;  // its local header has a zip64 field
  };
  uint64_t cursor_ = 0;  // bytes of the archive so far, the callers' data included
  std::vector<Entry> entries_;
};

}  // namespace rankwise::checkpoint::torch_save
