#include "rankwise/checkpoint/sharded_manager.h"

#include <filesystem>

#include "checkpoint/managers/manager_base.h"
#include "checkpoint/ranks/rank_zero.h"
#include "checkpoint/sharded/complete.h"
#include "checkpoint/sharded/save_leading.h"
#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint {
namespace {

managers::ManagedKind directories() {
  return {"ShardedCheckpointManager", "", "opening the sharded checkpoint directory on rank 0",
          sharded::check_sharded_complete, [](const std::string& path) {
            std::error_code ignored;
            std::filesystem::remove_all(path, ignored);
          }};
}

}  // namespace

ShardedCheckpointManager::ShardedCheckpointManager(CheckpointManagerOptions options)
    : base_(std::make_unique<managers::ManagerBase>(std::move(options), directories())) {
  // On node-local disks the other nodes need the directory too (on a shared one it is there).
  if (dist::is_initialized() && dist::process_group().rank() != 0) {
    std::error_code ec;
    std::filesystem::create_directories(base_->options().directory(), ec);
  }
}

ShardedCheckpointManager::~ShardedCheckpointManager() = default;

const CheckpointManagerOptions& ShardedCheckpointManager::options() const { return base_->options(); }

bool ShardedCheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return base_->should_save(step, epoch_end);
}

std::vector<std::string> ShardedCheckpointManager::checkpoints() const { return base_->checkpoints(); }

std::string ShardedCheckpointManager::save(const ShardedState& state, int64_t step) {
  const std::string path = base_->path_for_save(step);
  const bool leads = sharded::save_sharded_leading(path, state, sharded::SaveLock::kHeldByCaller);
  // Each storage node's leader moves that node's `latest` and prunes its disk: rank 0 alone on a
  // shared filesystem, one rank per node on node-local disks.
  ranks::on_ranks(
      leads,
      [&] {
        base_->check_lock();
        base_->point_latest_and_prune(path);
      },
      fmt::format("moving `latest` after the sharded save of step {}", step));
  return path;
}

std::optional<std::string> ShardedCheckpointManager::latest() const { return base_->latest(); }

std::optional<std::string> ShardedCheckpointManager::load_latest_collective(ShardedState& state) const {
  const auto decided = ranks::decided_on_rank_zero([&](c10::impl::GenericDict& decided) {
    if (auto path = latest()) decided.insert("path", *path);
  });
  if (!decided.contains("path")) return std::nullopt;
  const std::string path = decided.at("path").toStringRef();
  try {
    load_sharded_collective(path, state);
  } catch (const CheckpointError& e) {
    const std::string here = dist::is_initialized() ? core::where(core::at(dist::process_group())) : core::where({0, 1});
    core::raise<CheckpointError>(
        "{}: loading the latest sharded checkpoint '{}' failed: {}. If it is damaged, move it "
        "aside to resume from the one before",
        here, path, e.what());
  }
  return path;
}

}  // namespace rankwise::checkpoint
