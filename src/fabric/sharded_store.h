#pragma once
// CheckpointStore for sharded checkpoints (strategies zero1 and fsdp): one
// directory per checkpoint, every rank writing its shards
// (ShardedCheckpointManager), holding the strategy's model ("model.") and
// optimizer ("optim.") entries, the training state ("fabric.", see
// training_state_entries.h) and the optimizer's type ("fabric.optimizer_type").
#include <memory>
#include <string>

#include "fabric/checkpoint_store.h"

namespace rankwise::fabric {

std::unique_ptr<CheckpointStore> open_sharded_store(const FabricOptions& options);

// The sharded checkpoint in directory `path`, read when restored.
std::unique_ptr<PendingCheckpoint> sharded_checkpoint_at(const std::string& path, const FabricOptions& options);

}  // namespace rankwise::fabric
