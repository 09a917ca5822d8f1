// read_sharded_metadata(): the keys of a sharded checkpoint, from its .metadata.
#include "rankwise/checkpoint/sharded_metadata.h"

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/sharded/reader.h"

namespace rankwise::checkpoint {

std::map<std::string, ShardedEntryMetadata> read_sharded_metadata(const std::string& dir) {
  sharded::ShardedReader reader(io::without_trailing_slash(dir), "read_sharded_metadata");
  reader.open(reader.read_files());
  std::map<std::string, ShardedEntryMetadata> out;
  for (const auto& [key, tensor] : reader.metadata().tensors) {
    out[key] = ShardedEntryMetadata{true, tensor.size, tensor.dtype, static_cast<int64_t>(tensor.chunks.size())};
  }
  for (const auto& [key, object] : reader.metadata().objects) out[key] = ShardedEntryMetadata{false, {}, {}, 0};
  return out;
}

}  // namespace rankwise::checkpoint
