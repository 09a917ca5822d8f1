#include "rankwise/checkpoint/sharded_manager.h"

#include <filesystem>

#include "checkpoint/detail/fault_injection.h"
#include "checkpoint/detail/file_lock.h"
#include "checkpoint/detail/numbered_checkpoints.h"
#include "checkpoint/detail/rank_zero.h"
#include "checkpoint/detail/sharded_complete.h"
#include "checkpoint/detail/sharded_save.h"
#include "detail/where.h"
#include "rankwise/error.h"
#include "rankwise/process_group.h"

namespace rankwise {

ShardedCheckpointManager::ShardedCheckpointManager(CheckpointManagerOptions options)
    : options_(std::move(options)) {
  detail::validate_manager_options(options_, "ShardedCheckpointManager");
  numbered_ = std::make_unique<detail::NumberedCheckpoints>(options_.directory(), options_.prefix(), "");
  detail::on_rank_zero([&] { lock_ = detail::open_checkpoint_directory(options_.directory()); },
                       "opening the sharded checkpoint directory on rank 0");
  // On node-local disks the other nodes need the directory too (on a shared one it is there).
  if (is_initialized() && process_group().rank() != 0) {
    std::error_code ec;
    std::filesystem::create_directories(options_.directory(), ec);
  }
}

ShardedCheckpointManager::~ShardedCheckpointManager() = default;

bool ShardedCheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return detail::save_is_due(options_, step, epoch_end);
}

std::vector<std::string> ShardedCheckpointManager::checkpoints() const { return numbered_->list(); }

std::string ShardedCheckpointManager::save(const ShardedState& state, int64_t step) {
  if (step < 0) {
    throw ConfigError("rankwise: ShardedCheckpointManager::save step is " + std::to_string(step) +
                      "; it must be >= 0");
  }
  const std::string path = numbered_->path_for(step);
  const bool leads = detail::save_sharded_leading(path, state, detail::SaveLock::kHeldByCaller);
  // Each storage node's leader moves that node's `latest` and prunes its disk: rank 0 alone on a
  // shared filesystem, one rank per node on node-local disks.
  detail::on_ranks(
      leads,
      [&] {
        const bool rank_zero = !is_initialized() || process_group().rank() == 0;
        if (rank_zero && !lock_) {
          throw CheckpointError("rankwise: internal error: rank 0 does not hold the lock of '" +
                                options_.directory() + "'");
        }
        detail::fault_at("before-latest");
        numbered_->point_latest_to(path);
        detail::fault_at("before-prune");
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
  return numbered_->newest_usable(detail::check_sharded_complete);
}

std::optional<std::string> ShardedCheckpointManager::load_latest_collective(ShardedState& state) const {
  const auto decided = detail::decided_on_rank_zero([&](c10::impl::GenericDict& decided) {
    if (auto path = latest()) decided.insert("path", *path);
  });
  if (!decided.contains("path")) return std::nullopt;
  const std::string path = decided.at("path").toStringRef();
  try {
    load_sharded_collective(path, state);
  } catch (const CheckpointError& e) {
    const std::string here = is_initialized() ? detail::where(process_group()) : detail::where(0, 1);
    throw CheckpointError("rankwise: " + here + ": loading the latest sharded checkpoint '" + path +
                          "' failed: " + e.what() + ". If it is damaged, move it aside to resume from the one before");
  }
  return path;
}

}  // namespace rankwise
