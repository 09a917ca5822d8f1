#include "rankwise/checkpoint/manager.h"

#include "core/check.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "checkpoint/async/background_save.h"
#include "checkpoint/async/host_snapshot.h"
#include "checkpoint/managers/manager_base.h"
#include "checkpoint/pickle/saveable_value.h"
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
    : base_(std::make_unique<managers::ManagerBase>(std::move(options), files())),
      background_(std::make_unique<async::BackgroundSave>()) {}

// A save that failed with nobody left to raise it to: the run must not end
// as if it had succeeded. Rank 0 says why and exits with status 1 (unless an
// exception is already ending the run), so the launcher names it.
CheckpointManager::~CheckpointManager() {
  try {
    finish_background_save();
  } catch (const std::exception& e) {
    if (std::uncaught_exceptions() == 0) async::exit_unwaited(e, "CheckpointManager");
    std::fprintf(stderr, "error: %s (while an exception ends the run)\n", e.what());
  }
}

const CheckpointManagerOptions& CheckpointManager::options() const { return base_->options(); }

bool CheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return base_->should_save(step, epoch_end);
}

std::vector<std::string> CheckpointManager::checkpoints() const { return base_->checkpoints(); }

std::string CheckpointManager::save(const Checkpoint& state, int64_t step) {
  const auto started = std::chrono::steady_clock::now();
  const std::string path = base_->path_for_save(step);
  wait();
  ranks::on_rank_zero(
      [&] {
        base_->check_lock();
        torch_save::write_checkpoint_file(c10::IValue(state.dict()), path);
        base_->point_latest_and_prune(path);
      },
      "the save by rank 0");
  timings_.blocked_ms = async::ms_since(started);
  return path;
}

void CheckpointManager::finish_background_save() {
  try {
    timings_.waited_ms = background_->finish().count();
  } catch (const std::exception& e) {
    core::raise<CheckpointError>("the asynchronous save of '{}' failed: {}; the checkpoint before it, if any, stays latest",
                                 in_flight_path_, e.what());
  }
}

std::string CheckpointManager::save_async(const Checkpoint& state, int64_t step) {
  const auto started = std::chrono::steady_clock::now();
  const std::string path = base_->path_for_save(step);
  in_flight_ = false;  // finished below, on rank 0, whatever happens
  timings_.waited_ms = 0;
  ranks::on_rank_zero(
      [&] {
        finish_background_save();
        base_->check_lock();
        pickle::check_saveable(c10::IValue(state.dict()));
        if (!snapshot_) snapshot_ = std::make_unique<async::HostSnapshot>();
        c10::IValue copy = snapshot_->take(c10::IValue(state.dict()));
        in_flight_path_ = path;
        background_->start([this, copy = std::move(copy), path] {
          snapshot_->wait_for_device_copies();
          torch_save::write_checkpoint_file(copy, path);
          base_->point_latest_and_prune(path);
        });
      },
      "the asynchronous save by rank 0");
  in_flight_ = true;
  timings_.blocked_ms = async::ms_since(started);
  return path;
}

void CheckpointManager::wait() {
  const auto started = std::chrono::steady_clock::now();
  timings_.waited_ms = 0;
  if (std::exchange(in_flight_, false)) {
    ranks::on_rank_zero([&] { finish_background_save(); }, "the asynchronous save by rank 0");
  }
  timings_.blocked_ms = async::ms_since(started);
}

std::optional<std::string> CheckpointManager::latest() const { return base_->latest(); }

void CheckpointManager::clear() {
  wait();
  base_->clear();
}

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
