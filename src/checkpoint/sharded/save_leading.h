#pragma once
// save_sharded() that also tells the caller whether this rank leads a
// storage node (rank 0, and on node-local disks the first rank of each
// other node): the rank that renamed that node's directory into place, and
// so the one to move that node's `latest` pointer (ShardedCheckpointManager).
#include <string>

#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint::sharded {

/// Whether save_sharded_leading takes `dir`.lock on rank 0: a plain
/// save_sharded does; ShardedCheckpointManager already holds its
/// directory's lock.
enum class SaveLock { kTake, kHeldByCaller };

/// save_sharded(dir, state); returns true on the ranks that published a
/// storage node's directory. Collective, throws as save_sharded().
bool save_sharded_leading(const std::string& dir, const ShardedState& state, SaveLock lock);

}  // namespace rankwise::checkpoint::sharded
