#pragma once
/// The `.metadata` file of a checkpoint directory in the layout of PyTorch's
/// torch.distributed.checkpoint (DCP) FileSystemWriter: a pickled
/// `torch.distributed.checkpoint.metadata.Metadata` whose
/// `state_dict_metadata` maps each key to a `TensorStorageMetadata`
/// (TensorProperties, global torch.Size, a list of ChunkStorageMetadata with
/// the offsets and sizes of each chunk) and whose `storage_data` maps a
/// `MetadataIndex(fqn, offset)` to a `_StorageInfo(relative_path, offset,
/// length)`: where the chunk's torch.save record lies in which
/// `__<rank>_<n>.distcp` file. Field names and pickling checked against
/// torch 2.15.0's metadata.py and filesystem.py (and its own dcp.save
/// output, disassembled with pickletools).
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rankwise::checkpoint::sharded {

/// One stored chunk of a tensor.
struct DcpChunk {
  std::vector<int64_t> offsets;  ///< along every dimension of the global tensor
  std::vector<int64_t> sizes;
  std::string relative_path;     ///< data file, relative to the directory
  int64_t offset = 0;            ///< bytes: where its torch.save record starts in that file
  int64_t length = 0;            ///< bytes of that record
};

/// One tensor entry.
struct DcpTensor {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> size;  ///< the global shape
  std::vector<DcpChunk> chunks;
};

/// One non-tensor entry (BytesStorageMetadata): the torch.save record of a
/// Python object, indexed in storage_data by MetadataIndex(fqn, None, None).
struct DcpObject {
  std::string relative_path;
  int64_t offset = 0;  ///< bytes: where its record starts in that file
  int64_t length = 0;  ///< bytes of that record
};

/// What rankwise uses of a `.metadata`.
struct DcpMetadata {
  std::map<std::string, DcpTensor> tensors;
  std::map<std::string, DcpObject> objects;
};

/// The pickle (protocol 2) of `metadata` as a `Metadata` that Python's
/// torch 2.x reads: TensorProperties pickled as its __getstate__ returns it
/// (the 5-element form, without strides, that every torch 2.x accepts),
/// planner_data {key: (key,)} as DCP's default planner writes it, version
/// "1.0.0", storage_meta None; objects as BytesStorageMetadata().
std::string pickle_dcp_metadata(const DcpMetadata& metadata);

/// Reads a `.metadata` pickle (any protocol Python writes). Throws
/// CheckpointError naming `path` when it is not such a Metadata, holds a
/// dtype rankwise does not know, or a chunk or object without its storage entry.
DcpMetadata unpickle_dcp_metadata(const std::string& bytes, const std::string& path);

}  // namespace rankwise::checkpoint::sharded
