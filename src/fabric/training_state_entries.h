#pragma once
// The Fabric's training state in a sharded checkpoint: what
// checkpoint::capture() saves besides the model and the optimizer ("step",
// "epoch", "position", "epoch_stretches", each rank's RNG and metric states
// in "rank_states", "extras", "lr_scheduler", ...), one ObjectEntry per entry
// under "fabric.", so that the replicated and the sharded checkpoints hold
// one format. Object entries cannot hold tensors: each tensor (RNG and metric
// states, a tensor in extras) is a replicated tensor entry beside them
// ("fabric.rank_states.0.rng.cpu"), and the object holds
// {"rankwise.tensor": "<that key>"} in its place.
#include "fabric/strategy.h"
#include "rankwise/checkpoint/checkpoint.h"

namespace rankwise::fabric {

constexpr const char* kTrainingPrefix = "fabric.";

// `captured` (capture() of a state without model and optimizer) as entries.
// Its extras are rank 0's on every rank, as in a replicated checkpoint, which
// rank 0 writes (one all_gather). Collective.
checkpoint::ShardedState training_state_entries(const checkpoint::Checkpoint& captured);

// The entries under "fabric." of a checkpoint that stores `stored`, for
// load_sharded() to fill. Local.
checkpoint::ShardedState training_state_to_load(const StoredKeys& stored);

// The training state back from what load_sharded() filled, for restore().
// Throws CheckpointError when an entry refers to a tensor the checkpoint lacks.
checkpoint::Checkpoint training_state_from(const checkpoint::ShardedState& loaded);

}  // namespace rankwise::fabric
