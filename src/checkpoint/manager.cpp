#include "rankwise/checkpoint/manager.h"

#include "core/check.h"

#include <unistd.h>

#include "checkpoint/managers/manager_base.h"
#include "checkpoint/ranks/agreed_read.h"
#include "checkpoint/ranks/rank_zero.h"
#include "checkpoint/torch_save/checkpoint_file.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint {
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

managers::ManagedKind files() {
  return {"CheckpointManager", ".pt", "opening the checkpoint directory on rank 0", verify_managed,
          [](const std::string& path) { ::unlink(path.c_str()); }};
}

}  // namespace

CheckpointManager::CheckpointManager(CheckpointManagerOptions options)
    : base_(std::make_unique<managers::ManagerBase>(std::move(options), files())) {}

CheckpointManager::~CheckpointManager() = default;

const CheckpointManagerOptions& CheckpointManager::options() const { return base_->options(); }

bool CheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return base_->should_save(step, epoch_end);
}

std::vector<std::string> CheckpointManager::checkpoints() const { return base_->checkpoints(); }

std::string CheckpointManager::save(const Checkpoint& state, int64_t step) {
  const std::string path = base_->path_for_save(step);
  ranks::on_rank_zero(
      [&] {
        base_->check_lock();
        torch_save::write_checkpoint_file(c10::IValue(state.dict()), path);
        base_->point_latest_and_prune(path);
      },
      "the save by rank 0");
  return path;
}

std::optional<std::string> CheckpointManager::latest() const { return base_->latest(); }

void CheckpointManager::clear() { base_->clear(); }

std::optional<Checkpoint> CheckpointManager::load_latest(std::string* path) const {
  // Loading verifies the checksum, so each candidate is read once.
  std::optional<Checkpoint> loaded;
  auto found = base_->newest_usable([&](const std::string& candidate) {
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
