// load_sharded(): each rank reads the byte ranges of the stored chunks that
// overlap the chunks it wants, verified against the manifest when there is one
// (detail::ShardedReader).
#include "checkpoint/sharded/reader.h"
#include "checkpoint/io/atomic_file.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint {

void load_sharded(const std::string& dir, ShardedState& state, ShardedLoadOptions options) {
  sharded::ShardedReader reader(io::without_trailing_slash(dir), "load_sharded", options);
  reader.open(reader.read_files());
  for (const auto& piece : reader.plan(state)) reader.copy(piece);
  reader.read_objects(state);
}

}  // namespace rankwise::checkpoint
