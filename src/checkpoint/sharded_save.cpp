// save_sharded(): every rank writes its own data file; rank 0 publishes
// (the phases are in sharded/save_phases.cpp).
#include "checkpoint/sharded/save_phases.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint {

void save_sharded(const std::string& dir, const ShardedState& state) {
  sharded::save_sharded_leading(dir, state, sharded::SaveLock::kTake);
}

}  // namespace rankwise::checkpoint
