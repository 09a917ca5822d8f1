#include "rankwise/checkpoint/sharded_manager.h"

#include <filesystem>

#include "checkpoint/io/fault_injection.h"
#include "checkpoint/io/file_lock.h"
#include "checkpoint/managers/numbered_checkpoints.h"
#include "checkpoint/ranks/rank_zero.h"
#include "checkpoint/sharded/complete.h"
#include "checkpoint/sharded/save_leading.h"
#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint {

ShardedCheckpointManager::ShardedCheckpointManager(CheckpointManagerOptions options)
    : options_(std::move(options)) {
  managers::validate_manager_options(options_, "ShardedCheckpointManager");
  numbered_ = std::make_unique<managers::NumberedCheckpoints>(options_.directory(), options_.prefix(), "");
  ranks::on_rank_zero([&] { lock_ = managers::open_checkpoint_directory(options_.directory()); },
                       "opening the sharded checkpoint directory on rank 0");
  // On node-local disks the other nodes need the directory too (on a shared one it is there).
  if (dist::is_initialized() && dist::process_group().rank() != 0) {
    std::error_code ec;
    std::filesystem::create_directories(options_.directory(), ec);
  }
}

ShardedCheckpointManager::~ShardedCheckpointManager() = default;

bool ShardedCheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return managers::save_is_due(options_, step, epoch_end);
}

std::vector<std::string> ShardedCheckpointManager::checkpoints() const { return numbered_->list(); }

std::string ShardedCheckpointManager::save(const ShardedState& state, int64_t step) {
  if (step < 0) {
    core::raise<ConfigError>("ShardedCheckpointManager::save step is {}; it must be >= 0", step);
  }
  const std::string path = numbered_->path_for(step);
  const bool leads = sharded::save_sharded_leading(path, state, sharded::SaveLock::kHeldByCaller);
  // Each storage node's leader moves that node's `latest` and prunes its disk: rank 0 alone on a
  // shared filesystem, one rank per node on node-local disks.
  ranks::on_ranks(
      leads,
      [&] {
        const bool rank_zero = !dist::is_initialized() || dist::process_group().rank() == 0;
        if (rank_zero && !lock_) {
          core::raise<CheckpointError>("internal error: rank 0 does not hold the lock of '{}'",
                                       options_.directory());
        }
        io::fault_at("before-latest");
        numbered_->point_latest_to(path);
        io::fault_at("before-prune");
        const auto all = numbered_->list();
        const auto keep = static_cast<std::size_t>(options_.keep_last());
        for (std::size_t i = 0; i + keep < all.size(); ++i) {
          std::error_code ignored;
          if (all[i] != path) std::filesystem::remove_all(all[i], ignored);
        }
      },
      "moving `latest` after the sharded save of step " + std::to_string(step));
  return path;
}

std::optional<std::string> ShardedCheckpointManager::latest() const {
  return numbered_->newest_usable(sharded::check_sharded_complete);
}

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
