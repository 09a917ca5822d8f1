#include "rankwise/checkpoint/manager.h"

#include "core/check.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "checkpoint/ranks/agreed_read.h"
#include "checkpoint/io/atomic_file.h"
#include "checkpoint/torch_save/checkpoint_file.h"
#include "checkpoint/io/fault_injection.h"
#include "checkpoint/io/file_lock.h"
#include "checkpoint/managers/numbered_checkpoints.h"
#include "checkpoint/ranks/rank_zero.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint {
namespace {

constexpr const char* kSuffix = ".pt";

}  // namespace

CheckpointManager::CheckpointManager(CheckpointManagerOptions options)
    : options_(std::move(options)) {
  managers::validate_manager_options(options_, "CheckpointManager");
  numbered_ = std::make_unique<managers::NumberedCheckpoints>(options_.directory(), options_.prefix(), kSuffix);
  ranks::on_rank_zero([&] { lock_ = managers::open_checkpoint_directory(options_.directory()); },
                       "opening the checkpoint directory on rank 0");
}

CheckpointManager::~CheckpointManager() = default;

bool CheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return managers::save_is_due(options_, step, epoch_end);
}

std::vector<std::string> CheckpointManager::checkpoints() const { return numbered_->list(); }

std::string CheckpointManager::save(const Checkpoint& state, int64_t step) {
  if (step < 0) {
    core::raise<ConfigError>("CheckpointManager::save step is {}; it must be >= 0", step);
  }
  const std::string path = numbered_->path_for(step);
  ranks::on_rank_zero(
      [&] {
        if (!lock_) {
          core::raise<CheckpointError>("internal error: rank 0 does not hold the lock of '{}'",
                                       options_.directory());
        }
        torch_save::write_checkpoint_file(c10::IValue(state.dict()), path);
        io::fault_at("before-latest");
        numbered_->point_latest_to(path);
        io::fault_at("before-prune");
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
  core::raise<CheckpointError>(
      "checkpoint '{}' has no checksum record (truncated, or not written by rankwise)", path);
}

void verify_managed(const std::string& path) {
  if (!verify(path)) no_checksum(path);
}

}  // namespace

std::optional<std::string> CheckpointManager::latest() const {
  return numbered_->newest_usable(verify_managed);
}

void CheckpointManager::clear() {
  ranks::on_rank_zero(
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
    torch_save::Integrity integrity;
    c10::IValue value = torch_save::read_checkpoint_file(candidate, &integrity);
    if (integrity != torch_save::Integrity::kVerified) no_checksum(candidate);
    loaded = torch_save::checkpoint_from(value, candidate);
  });
  if (!found) return std::nullopt;
  if (path) *path = *found;
  return loaded;
}

std::optional<Checkpoint> CheckpointManager::load_latest_collective(
    std::string* path, CollectiveLoadOptions options) const {
  auto file = ranks::read_agreed([this] { return latest(); }, options);
  if (!file) return std::nullopt;
  if (path) *path = file->path;
  return torch_save::checkpoint_from(file->value, file->path);
}

}  // namespace rankwise::checkpoint
