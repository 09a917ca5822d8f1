#pragma once
/// torch.save's zip archive written front to back, streamed: the pickle,
/// then each storage's bytes straight from where they are (no copy of a
/// whole record), each byte checksummed once.
///
/// Entries, in the order Python's torch.save 2.x writes them (and readable
/// by libtorch's PyTorchStreamReader, caffe2/serialize/inline_container.cc,
/// of 1.13 and 2.x): `archive/data.pkl` (the pickle), `archive/.format_version`
/// ("1"), `archive/.storage_alignment` ("64"), `archive/byteorder`
/// ("little"), `archive/data/<i>` (storage i, as the pickle's persistent ids
/// name them), `archive/version` ("3\n"). Stored (uncompressed) entries laid
/// out by StoredZip (stored_zip.h): data 64-byte aligned, CRC-32 and sizes in
/// data descriptors, zip64 where needed. `.data/serialization_id` (a random
/// id torch 2.x adds, which no reader needs) is left out.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/torch_save/tensor_bytes.h"

namespace rankwise::checkpoint::torch_save {

/// One storage to write: its size in bytes, and a function that hands
/// exactly that many bytes to the sink it is given (in pieces of any size)
/// and returns their CRC-32 (zlib's crc32).
struct StorageWriter {
  uint64_t size = 0;
  std::function<uint32_t(const ByteSink& sink)> write;
};

/// A run of the archive's bytes and their CRC-32. Bytes, from the archive's start.
struct ArchivePart {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc32 = 0;
  int storage = -1;  ///< the index of the storage these bytes are, or -1 for zip structure and small entries
};

/// What write_torch_save_archive wrote: its parts, in order, covering it whole.
struct WrittenArchive {
  uint64_t length = 0;
  std::vector<ArchivePart> parts;
  /// CRC-32 of the parts [first, last), combined from theirs (crc32_combine: no pass over the data).
  uint32_t crc32_of(std::size_t first, std::size_t last) const;
  /// CRC-32 of the whole archive.
  uint32_t crc32() const { return crc32_of(0, parts.size()); }
};

/// Writes the archive of `pickle` (protocol 2, as torch::jit::Pickler or
/// PickleWriter makes it) and `storages` to `sink`. `comment_length` is put
/// in the end-of-central-directory record, for a comment of that many bytes
/// the caller writes after the archive (checkpoint_file.h's trailer).
/// Throws CheckpointError when a storage's writer hands more or fewer bytes
/// than its size; whatever the sink or a writer throws passes through (the
/// archive is then partial).
WrittenArchive write_torch_save_archive(const std::string& pickle, const std::vector<StorageWriter>& storages,
                                        const ByteSink& sink, uint16_t comment_length = 0);

/// A StorageWriter of `size` bytes at `data` (memory that stays valid while
/// the archive is written), handed over and checksummed 1 MiB at a time, so
/// that each piece is checksummed and written while it is in the core's cache.
StorageWriter storage_from_memory(const char* data, uint64_t size);

}  // namespace rankwise::checkpoint::torch_save
