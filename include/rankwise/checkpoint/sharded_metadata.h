#pragma once
/// \file sharded_metadata.h
/// What a sharded checkpoint holds, read from its `.metadata` alone (as
/// Python's `FileSystemReader(dir).read_metadata().state_dict_metadata`):
/// every key with its global shape and dtype, or that it is a non-tensor
/// value. To build the targets of a load at another world size without
/// knowing the keys in advance (ZeroRedundancyOptimizer::sharded_state_dict_to_load).

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rankwise::checkpoint {

/// One entry of a sharded checkpoint.
struct ShardedEntryMetadata {
  /// False for a non-tensor value (ObjectEntry; DCP's BytesStorageMetadata):
  /// then global_shape is empty and dtype meaningless.
  bool is_tensor = true;
  std::vector<int64_t> global_shape;
  c10::ScalarType dtype = c10::ScalarType::Float;
  /// Chunks stored (on all ranks together; 0 for an object).
  int64_t stored_chunks = 0;
};

/// Every key of the sharded checkpoint `dir` (rankwise's or Python dcp.save's),
/// sorted. Reads `.metadata` only, verified against the manifest's CRC-32
/// when there is one. Local: any rank, no communication. Throws
/// CheckpointError when `dir` is not a sharded checkpoint or its `.metadata`
/// is damaged.
std::map<std::string, ShardedEntryMetadata> read_sharded_metadata(const std::string& dir);

}  // namespace rankwise::checkpoint
