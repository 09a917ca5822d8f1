#include "rankwise/checkpoint/manager.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "checkpoint/detail/agreed_read.h"
#include "checkpoint/detail/atomic_file.h"
#include "checkpoint/detail/checkpoint_file.h"
#include "checkpoint/detail/fault_injection.h"
#include "checkpoint/detail/file_lock.h"
#include "checkpoint/detail/numbered_checkpoints.h"
#include "checkpoint/detail/rank_zero.h"
#include "rankwise/error.h"
#include "rankwise/process_group.h"

namespace rankwise {
namespace {

constexpr const char* kSuffix = ".pt";

}  // namespace

CheckpointManager::CheckpointManager(CheckpointManagerOptions options)
    : options_(std::move(options)) {
  detail::validate_manager_options(options_, "CheckpointManager");
  numbered_ = std::make_unique<detail::NumberedCheckpoints>(options_.directory(), options_.prefix(), kSuffix);
  detail::on_rank_zero([&] { lock_ = detail::open_checkpoint_directory(options_.directory()); },
                       "opening the checkpoint directory on rank 0");
}

CheckpointManager::~CheckpointManager() = default;

bool CheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return detail::save_is_due(options_, step, epoch_end);
}

std::vector<std::string> CheckpointManager::checkpoints() const { return numbered_->list(); }

std::string CheckpointManager::save(const Checkpoint& state, int64_t step) {
  if (step < 0) {
    throw ConfigError("rankwise: CheckpointManager::save step is " + std::to_string(step) +
                      "; it must be >= 0");
  }
  const std::string path = numbered_->path_for(step);
  detail::on_rank_zero(
      [&] {
        if (!lock_) {
          throw CheckpointError("rankwise: internal error: rank 0 does not hold the lock of '" +
                                options_.directory() + "'");
        }
        detail::write_checkpoint_file(c10::IValue(state.dict()), path);
        detail::fault_at("before-latest");
        numbered_->point_latest_to(path);
        detail::fault_at("before-prune");
        auto all = checkpoints();
        const auto keep = static_cast<std::size_t>(options_.keep_last());
        for (std::size_t i = 0; i + keep < all.size(); ++i) {
          if (all[i] != path) ::unlink(all[i].c_str());
        }
      },
      "the save by rank 0");
  return path;
}

namespace {

// Throws CheckpointError unless `path` verifies against its recorded checksum
// (every file the manager writes has one; a file without it was truncated).
[[noreturn]] void no_checksum(const std::string& path) {
  throw CheckpointError("rankwise: checkpoint '" + path +
                        "' has no checksum record (truncated, or not written by rankwise)");
}

void verify_managed(const std::string& path) {
  if (!verify(path)) no_checksum(path);
}

}  // namespace

std::optional<std::string> CheckpointManager::latest() const {
  return numbered_->newest_usable(verify_managed);
}

void CheckpointManager::clear() {
  detail::on_rank_zero(
      [&] {
        for (const auto& path : checkpoints()) ::unlink(path.c_str());
        numbered_->remove_latest();
      },
      "clearing the checkpoint directory on rank 0");
}

std::optional<Checkpoint> CheckpointManager::load_latest(std::string* path) const {
  // Loading verifies the checksum, so each candidate is read once.
  std::optional<Checkpoint> loaded;
  auto found = numbered_->newest_usable([&](const std::string& candidate) {
    detail::Integrity integrity;
    c10::IValue value = detail::read_checkpoint_file(candidate, &integrity);
    if (integrity != detail::Integrity::kVerified) no_checksum(candidate);
    loaded = detail::checkpoint_from(value, candidate);
  });
  if (!found) return std::nullopt;
  if (path) *path = *found;
  return loaded;
}

std::optional<Checkpoint> CheckpointManager::load_latest_collective(
    std::string* path, CollectiveLoadOptions options) const {
  auto file = detail::read_agreed([this] { return latest(); }, options);
  if (!file) return std::nullopt;
  if (path) *path = file->path;
  return detail::checkpoint_from(file->value, file->path);
}

}  // namespace rankwise
