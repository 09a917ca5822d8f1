#pragma once
/// Writes one tensor as the torch.save record that parse_tensor_record
/// (tensor_record.h) reads, streamed: the tensor's bytes go from its own
/// memory (or bounded copies, tensor_bytes.h) straight to the sink, and are
/// checksummed once, in the same pass.
///
/// Layout (as Python torch.save 2.x and libtorch's PyTorchStreamWriter,
/// caffe2/serialize/inline_container.cc, lay it out): a zip of stored
/// (uncompressed) entries `archive/data.pkl`, `archive/.format_version`
/// ("1"), `archive/.storage_alignment` ("64"), `archive/byteorder`
/// ("little"), `archive/data/0` (the storage: the tensor's elements,
/// row-major), `archive/version` ("3\n"); every entry's data starts at a
/// multiple of 64 bytes of the record (an extra field "FB" of padding in its
/// local header), its CRC-32 and sizes follow its data in a data descriptor
/// (general-purpose flag bit 3), and zip64 fields appear where a size or an
/// offset reaches 2^32 - 1. `.data/serialization_id` (a random id torch 2.x
/// adds, which no reader needs) is left out.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "checkpoint/torch_save/tensor_bytes.h"

namespace rankwise::checkpoint::torch_save {

/// Where a written record's parts are and their CRC-32s (zlib's crc32). Bytes, relative to the record's start.
struct WrittenRecord {
  int64_t length = 0;
  int64_t data_begin = 0;          ///< the storage's first byte
  int64_t data_size = 0;           ///< bytes of the storage
  uint32_t header_crc32 = 0;       ///< of [0, data_begin)
  uint32_t trailer_crc32 = 0;      ///< of [data_begin + data_size, length)
  std::vector<uint32_t> block_crc32;  ///< of each `block_bytes` of the storage (the last may be shorter)
};

/// Writes the record of `tensor.contiguous()` (a CPU tensor of a dtype
/// dtype_names.h knows; any strides, any size, 0-d included) to `sink`:
/// torch.load of the bytes gives a tensor equal to `tensor`, contiguous. The
/// memory added is at most 8 MiB (the copy of a non-contiguous tensor's
/// pieces) plus the headers. Throws CheckpointError for another device or
/// dtype or a `block_bytes` (bytes each block CRC covers) that is not
/// positive; whatever `sink` throws passes through (the record is then partial).
WrittenRecord write_tensor_record(const at::Tensor& tensor, int64_t block_bytes, const ByteSink& sink);

}  // namespace rankwise::checkpoint::torch_save
