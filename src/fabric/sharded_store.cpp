#include "fabric/sharded_store.h"

#include <filesystem>

#include "checkpoint/ranks/rank_zero.h"
#include "core/check.h"
#include "fabric/training_state_entries.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/sharded_manager.h"
#include "rankwise/dist/consensus.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"
#include "rankwise/log.h"

namespace rankwise::fabric {
namespace {

constexpr const char* kOptimizerTypeKey = "fabric.optimizer_type";

// What a checkpoint stores, as rank 0 reads it, on every rank (a stale or
// node-local view elsewhere does not matter). Collective.
StoredKeys stored_keys(const std::string& path) {
  const auto decided = checkpoint::ranks::decided_on_rank_zero([&](c10::impl::GenericDict& decided) {
    for (const auto& [key, entry] : checkpoint::read_sharded_metadata(path)) {
      c10::impl::GenericList description(c10::AnyType::get());
      description.push_back(entry.is_tensor);
      description.push_back(static_cast<int64_t>(entry.dtype));
      description.push_back(c10::List<int64_t>(entry.global_shape));
      description.push_back(entry.stored_chunks);
      decided.insert(key, description);
    }
  });
  StoredKeys stored;
  for (const auto& item : decided) {
    const auto description = item.value().toListRef();
    checkpoint::ShardedEntryMetadata entry;
    entry.is_tensor = description[0].toBool();
    entry.dtype = static_cast<c10::ScalarType>(description[1].toInt());
    entry.global_shape = description[2].toIntVector();
    entry.stored_chunks = description[3].toInt();
    stored.emplace(item.key().toStringRef(), std::move(entry));
  }
  return stored;
}

// A sharded checkpoint's directory, read when restored: the training state
// first (small), to check the optimizer's type before its entries are
// loaded; then the model and the optimizer, each rank its shards.
class ShardedCheckpoint : public PendingCheckpoint {
 public:
  ShardedCheckpoint(std::string path, checkpoint::CollectiveLoadOptions options)
      : path_(std::move(path)), options_(options) {}

  void restore(checkpoint::TrainingState& state, Strategy& strategy) override {
    const StoredKeys stored = stored_keys(path_);
    auto training = training_state_to_load(stored);
    if (stored.count(kOptimizerTypeKey) != 0) training.emplace(kOptimizerTypeKey, checkpoint::ObjectEntry{});
    load(training);
    check_optimizer_type(training, strategy);
    auto model = strategy.sharded_state_dict_to_load(stored);
    load(model);
    strategy.load_sharded_state_dict(model);
    checkpoint::restore(training_state_from(training), state);
  }

 private:
  void load(checkpoint::ShardedState& state) const {
    checkpoint::load_sharded_collective(path_, state, options_, checkpoint::ShardedLoadOptions().strict(false));
  }

  void check_optimizer_type(const checkpoint::ShardedState& training, const Strategy& strategy) const {
    const auto it = training.find(kOptimizerTypeKey);
    if (it == training.end() || !strategy.has_optimizer()) return;
    const c10::IValue& saved = std::get<checkpoint::ObjectEntry>(it->second).value;
    const std::string mine = checkpoint::optimizer_type_name(strategy.optimizer());
    if (saved.isString() && saved.toStringRef() != mine) {
      core::raise<CheckpointError>(core::here(),
                                   "{}: the checkpoint's optimizer is {} and this run's is {}; resume "
                                   "with the same optimizer type",
                                   path_, saved.toStringRef(), mine);
    }
  }

  std::string path_;
  checkpoint::CollectiveLoadOptions options_;
};

class ShardedStore : public ManagedStore<checkpoint::ShardedCheckpointManager> {
 public:
  using ManagedStore::ManagedStore;

  std::string save(const checkpoint::TrainingState& state, const Strategy& strategy, bool async) override {
    auto entries = strategy.sharded_state_dict();  // collective (zero1's optimizer)
    entries.merge(training_state_entries(checkpoint::capture(state)));  // collective
    if (strategy.has_optimizer()) {
      entries.emplace(kOptimizerTypeKey, checkpoint::ObjectEntry{checkpoint::optimizer_type_name(strategy.optimizer())});
    }
    return async ? manager_.save_async(entries, state.step) : manager_.save(entries, state.step);
  }
  // Each storage node's leader (rank 0; with node-local disks each node's
  // local rank 0) removes the numbered directories and `latest` it sees.
  void clear_own() override {
    const bool node_local = load_options_.node_local();
    const bool leads = !dist::is_initialized() || (node_local ? dist::local_rank() : dist::rank()) == 0;
    checkpoint::ranks::on_ranks(
        leads,
        [&] {
          for (const auto& path : manager_.checkpoints()) std::filesystem::remove_all(path);
          std::filesystem::remove(std::filesystem::path(manager_.options().directory()) / "latest");
        },
        "removing an earlier run's sharded checkpoints");
  }
  bool sharded() const override { return true; }

  std::unique_ptr<PendingCheckpoint> latest(std::string& path) override {
    const auto decided = checkpoint::ranks::decided_on_rank_zero([&](c10::impl::GenericDict& decided) {
      if (auto newest = manager_.latest()) decided.insert("path", *newest);
    });
    if (!decided.contains("path")) return nullptr;
    path = decided.at("path").toStringRef();
    return std::make_unique<ShardedCheckpoint>(path, load_options_);
  }
};

}  // namespace

std::unique_ptr<CheckpointStore> open_sharded_store(const FabricOptions& options) {
  return std::make_unique<ShardedStore>(options);
}

std::unique_ptr<PendingCheckpoint> sharded_checkpoint_at(const std::string& path, const FabricOptions& options) {
  return std::make_unique<ShardedCheckpoint>(path, load_options(options));
}

}  // namespace rankwise::fabric
