#pragma once
// Where the Fabric's checkpoints go, by strategy: one replicated file per
// checkpoint that rank 0 writes (CheckpointManager; ddp), or one sharded
// directory that every rank writes its shards into (ShardedCheckpointManager;
// zero1, fsdp). Both hold the training state of checkpoint::capture(); the
// strategy gives the model's and the optimizer's part.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "fabric/strategy.h"
#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/training_state.h"

namespace rankwise::fabric {

// A checkpoint to be restored when training starts (after setup).
class PendingCheckpoint {
 public:
  virtual ~PendingCheckpoint() = default;
  // Restores `state`, and the strategy's model and optimizer. Collective.
  virtual void restore(checkpoint::TrainingState& state, Strategy& strategy) = 0;
};

class CheckpointStore {
 public:
  using Timings = checkpoint::CheckpointManager::Timings;
  virtual ~CheckpointStore() = default;

  // Whether the schedule asks for a save after step `step`. Local.
  virtual bool should_save(int64_t step, bool epoch_end) const = 0;
  // Saves `state` (no model nor optimizer: the strategy's are added) as the
  // checkpoint of its step, in the background with `async`; returns its
  // path. Collective.
  virtual std::string save(const checkpoint::TrainingState& state, const Strategy& strategy, bool async) = 0;
  // Waits for the save in flight and raises its failure on every rank. Collective.
  virtual void wait() = 0;
  virtual Timings last_timings() const = 0;

  // The checkpoints rank 0 sees, on every rank, of this store's kind
  // (replicated files or sharded directories) and of the other (a run of
  // another kind of strategy). Collective.
  struct Count {
    int64_t mine = 0;
    int64_t other_kind = 0;
  };
  Count count() const;
  // Removes every checkpoint (the other kind's too, on rank 0): a new run
  // replaces an earlier run's. Collective.
  void clear();
  // Rank 0's newest checkpoint, to resume from (a replicated one is loaded
  // now), its path in `path`; null when there is none. Collective.
  virtual std::unique_ptr<PendingCheckpoint> latest(std::string& path) = 0;

 protected:
  // The numbered checkpoints of this store's kind this rank sees.
  virtual std::size_t seen() const = 0;
  // Removes this store's kind of checkpoints. Collective.
  virtual void clear_own() = 0;
  // The directory, and whether this store's checkpoints are sharded.
  virtual const checkpoint::CheckpointManagerOptions& directory_options() const = 0;
  virtual bool sharded() const = 0;
};

// How every rank reads rank 0's checkpoint (FabricOptions::checkpoint_node_local).
checkpoint::CollectiveLoadOptions load_options(const FabricOptions& options);
// The checkpoint manager's options: the directory, keep_last, checkpoint_every.
checkpoint::CheckpointManagerOptions manager_options(const FabricOptions& options);

// What both stores share: a checkpoint manager of FabricOptions::checkpoint_dir
// (CheckpointManager or ShardedCheckpointManager) and how ranks read it.
template <typename Manager>
class ManagedStore : public CheckpointStore {
 public:
  explicit ManagedStore(const FabricOptions& options)
      : manager_(manager_options(options)), load_options_(load_options(options)) {}
  bool should_save(int64_t step, bool epoch_end) const override { return manager_.should_save(step, epoch_end); }
  void wait() override { manager_.wait(); }
  Timings last_timings() const override { return manager_.last_timings(); }

 protected:
  std::size_t seen() const override { return manager_.checkpoints().size(); }
  const checkpoint::CheckpointManagerOptions& directory_options() const override { return manager_.options(); }

  Manager manager_;
  checkpoint::CollectiveLoadOptions load_options_;
};

// The store of `options`' checkpoint directory, sharded or not. Collective:
// rank 0 creates and locks the directory.
std::unique_ptr<CheckpointStore> open_checkpoint_store(const FabricOptions& options, bool sharded);

// The checkpoint at `path` (a file, or a sharded checkpoint's directory), to
// restore (Fabric::load). Collective: a replicated one is loaded now.
std::unique_ptr<PendingCheckpoint> checkpoint_at(const std::string& path, const FabricOptions& options, bool sharded);

}  // namespace rankwise::fabric
