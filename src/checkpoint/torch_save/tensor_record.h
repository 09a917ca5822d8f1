#pragma once
/// One tensor as Python's torch.save writes it: a zip (APPNOTE.TXT) whose
/// entries are `<archive>/data.pkl` (a pickle calling
/// torch._utils._rebuild_tensor_v2 on a persistent storage id) and the
/// storage `<archive>/data/<key>`, stored uncompressed (PyTorch's
/// caffe2/serialize/inline_container.cc), so a slice of the tensor is a
/// byte range of the record. DCP's FileSystemWriter writes one such record
/// per chunk, back to back, into each `.distcp` file; rankwise writes them
/// with write_tensor_record (record_writer.h).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/torch_save/zip_directory.h"

namespace rankwise::checkpoint::torch_save {

/// What a record holds and where. Byte positions are relative to the record's start.
struct TensorRecord {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  ///< elements, all >= 0
  int64_t storage_offset = 0;    ///< elements
  int64_t data_begin = 0;        ///< bytes: the storage's first byte
  int64_t data_size = 0;         ///< bytes of the storage
};

/// Parses the record of `length` bytes that `read` gives, reading only its
/// central directory, local headers and data.pkl. Throws CheckpointError
/// naming `what` when it is not a torch.save record of one dense CPU tensor
/// whose elements lie inside its storage.
TensorRecord parse_tensor_record(const RecordReader& read, int64_t length, const std::string& what);

}  // namespace rankwise::checkpoint::torch_save
