// What both stores share, and the CheckpointStore for replicated checkpoints
// (strategy ddp): one file per checkpoint, written by rank 0 (CheckpointManager).
#include "fabric/checkpoint_store.h"

#include <filesystem>
#include <regex>
#include <vector>

#include "checkpoint/ranks/rank_zero.h"
#include "fabric/sharded_store.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/dist/consensus.h"
#include "rankwise/log.h"

namespace rankwise::fabric {

checkpoint::CollectiveLoadOptions load_options(const FabricOptions& options) {
  return checkpoint::CollectiveLoadOptions().node_local(options.checkpoint_node_local());
}

checkpoint::CheckpointManagerOptions manager_options(const FabricOptions& options) {
  return checkpoint::CheckpointManagerOptions(options.checkpoint_dir())
      .keep_last(options.keep_last())
      .every_n_steps(options.checkpoint_every());
}

namespace {

// The numbered checkpoints of the other kind in `options`' directory (this
// rank's view): `<prefix>-<10 digits>.pt` files beside a sharded store,
// `<prefix>-<10 digits>` directories beside a replicated one.
std::vector<std::filesystem::path> other_kind(const checkpoint::CheckpointManagerOptions& options, bool sharded) {
  const std::regex numbered(options.prefix() + "-[0-9]{10}" + (sharded ? "\\.pt" : ""));
  std::vector<std::filesystem::path> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(options.directory(), error)) {
    if (!std::regex_match(entry.path().filename().string(), numbered)) continue;
    if (entry.is_directory(error) != sharded) found.push_back(entry.path());
  }
  return found;
}

}  // namespace

CheckpointStore::Count CheckpointStore::count() const {
  const bool zero = is_rank_zero();
  return {dist::broadcast_decision<int64_t>(static_cast<int64_t>(zero ? seen() : 0), 0),
          dist::broadcast_decision<int64_t>(
              static_cast<int64_t>(zero ? other_kind(directory_options(), sharded()).size() : 0), 0)};
}

void CheckpointStore::clear() {
  clear_own();
  checkpoint::ranks::on_rank_zero(
      [&] {
        for (const auto& path : other_kind(directory_options(), sharded())) std::filesystem::remove_all(path);
      },
      "removing an earlier run's checkpoints of another strategy");
}

namespace {

// A replicated checkpoint, loaded (every rank has the same bytes).
class LoadedCheckpoint : public PendingCheckpoint {
 public:
  explicit LoadedCheckpoint(checkpoint::Checkpoint loaded) : loaded_(std::move(loaded)) {}
  void restore(checkpoint::TrainingState& state, Strategy& strategy) override {
    checkpoint::TrainingState whole = state;  // the metrics and the scheduler by pointer
    strategy.add_to(whole);
    checkpoint::restore(loaded_, whole);
    whole.model = nullptr;
    whole.optimizer = nullptr;
    state = std::move(whole);
  }

 private:
  checkpoint::Checkpoint loaded_;
};

class ReplicatedStore : public ManagedStore<checkpoint::CheckpointManager> {
 public:
  using ManagedStore::ManagedStore;

  std::string save(const checkpoint::TrainingState& state, const Strategy& strategy, bool async) override {
    checkpoint::TrainingState whole = state;
    strategy.add_to(whole);
    const auto captured = checkpoint::capture(whole);  // collective
    return async ? manager_.save_async(captured, state.step) : manager_.save(captured, state.step);
  }
  void clear_own() override { manager_.clear(); }
  bool sharded() const override { return false; }

  std::unique_ptr<PendingCheckpoint> latest(std::string& path) override {
    // Rank 0's latest, on every rank (its bytes sent where a node does not see it).
    auto loaded = manager_.load_latest_collective(&path, load_options_);
    if (!loaded) return nullptr;
    return std::make_unique<LoadedCheckpoint>(std::move(*loaded));
  }
};

}  // namespace

std::unique_ptr<CheckpointStore> open_checkpoint_store(const FabricOptions& options, bool sharded) {
  if (sharded) return open_sharded_store(options);
  return std::make_unique<ReplicatedStore>(options);
}

std::unique_ptr<PendingCheckpoint> checkpoint_at(const std::string& path, const FabricOptions& options, bool sharded) {
  if (sharded) return sharded_checkpoint_at(path, options);
  return std::make_unique<LoadedCheckpoint>(checkpoint::load_collective(path, load_options(options)));
}

}  // namespace rankwise::fabric
