#include "checkpoint/managers/manager_base.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "checkpoint/io/fault_injection.h"
#include "checkpoint/io/file_lock.h"
#include "checkpoint/io/note.h"
#include "util/io.h"
#include "checkpoint/ranks/rank_zero.h"
#include "core/check.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::managers {
namespace {

// Throws ConfigError (naming `who`) for a missing directory, keep_last < 1,
// every_n_steps < 0, or a prefix that is empty or has '/'.
void validate_manager_options(const CheckpointManagerOptions& options, const std::string& who) {
  if (options.directory().empty()) {
    core::raise<ConfigError>("{} needs a directory (CheckpointManagerOptions(dir))", who);
  }
  if (options.keep_last() < 1) {
    core::raise<ConfigError>("{} keep_last is {}; it must be at least 1", who, options.keep_last());
  }
  if (options.every_n_steps() < 0) {
    core::raise<ConfigError>("{} every_n_steps is {}; use 0 (off) or a positive count", who,
                             options.every_n_steps());
  }
  if (options.prefix().empty() || options.prefix().find('/') != std::string::npos) {
    core::raise<ConfigError>("{} prefix '{}' must be a non-empty file name without '/'", who,
                             options.prefix());
  }
}

// Rank 0's opening of a managed directory: creates it, takes its lock
// (`rankwise.lock`; a second holder is refused with a CheckpointError naming
// the first) and, holding it, removes what a killed writer left: ".tmp."
// files (AtomicFile) and ".rankwise-tmp." directories (save_sharded).
std::unique_ptr<io::FileLock> open_checkpoint_directory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir)) {
    core::raise<CheckpointError>(
        "cannot create the checkpoint directory '{}': {}. Choose a writable location", dir,
        (error ? error.message() : "a file of that name exists"));
  }
  auto lock = std::make_unique<io::FileLock>(fmt::format("{}/{}", dir, io::kDirectoryLockFile),
                                             fmt::format("checkpoint directory '{}'", dir));
  // Holding the lock, nobody else writes here: temporary files and
  // directories are leftovers of a writer that was killed.
  for (const auto& name : util::list_directory(dir)) {
    if (name.find(".rankwise-tmp.") != std::string::npos) {
      std::filesystem::remove_all(dir + "/" + name, error);
    } else if (name.find(".tmp.") != std::string::npos) {
      ::unlink((dir + "/" + name).c_str());
    }
  }
  return lock;
}

}  // namespace

ManagerBase::ManagerBase(CheckpointManagerOptions options, ManagedKind kind)
    : options_(std::move(options)),
      kind_(std::move(kind)),
      numbered_(options_.directory(), options_.prefix(), kind_.suffix) {
  validate_manager_options(options_, kind_.who);
  ranks::on_rank_zero([&] { lock_ = open_checkpoint_directory(options_.directory()); }, kind_.opening);
}

ManagerBase::~ManagerBase() = default;

bool ManagerBase::should_save(int64_t step, bool epoch_end) const {
  if (epoch_end && options_.at_epoch_end()) return true;
  return options_.every_n_steps() > 0 && step > 0 && step % options_.every_n_steps() == 0;
}

std::vector<std::string> ManagerBase::checkpoints() const { return numbered_.list(); }

std::optional<std::string> ManagerBase::latest() const { return numbered_.newest_usable(kind_.check_usable); }

std::optional<std::string> ManagerBase::newest_usable(const std::function<void(const std::string&)>& use) const {
  return numbered_.newest_usable(use);
}

std::string ManagerBase::path_for_save(int64_t step) const {
  if (step < 0) {
    core::raise<ConfigError>("{}: the step to save is {}; it must be >= 0", kind_.who, step);
  }
  if (!std::exchange(saved_before_, true) && dist::rank_or_zero() == 0) note_higher_steps(step);
  return numbered_.path_for(step);
}

// An earlier run's higher steps outrank this run's under keep_last (which keeps the highest
// numbers) and under a lost `latest` (the newest number wins): said once, at the first save.
void ManagerBase::note_higher_steps(int64_t step) const {
  const auto all = numbered_.list();
  if (all.empty()) return;
  const int64_t highest = numbered_.step_of(std::filesystem::path(all.back()).filename().string());
  if (highest <= step) return;
  io::note(core::message(
      "note: {}: '{}' already holds checkpoints up to step {}, above this save's step {} (an earlier run's?). "
      "keep_last keeps the highest-numbered, so this run's checkpoints would be removed first; save into a "
      "fresh directory, or clear() this one first",
      kind_.who, options_.directory(), highest, step));
}

void ManagerBase::check_lock() const {
  if (dist::rank_or_zero() == 0 && !lock_) {
    core::raise<CheckpointError>("internal error: rank 0 does not hold the lock of '{}'", options_.directory());
  }
}

void ManagerBase::point_latest_and_prune(const std::string& path) const {
  point_latest(path);
  prune(path);
}

void ManagerBase::point_latest(const std::string& path) const {
  io::fault_at("before-latest");
  numbered_.point_latest_to(path);
}

void ManagerBase::prune(const std::string& path) const {
  io::fault_at("before-prune");
  const auto all = numbered_.list();
  const auto keep = static_cast<std::size_t>(options_.keep_last());
  for (std::size_t i = 0; i + keep < all.size(); ++i) {
    if (all[i] != path) kind_.remove(all[i]);
  }
}

void ManagerBase::clear() const {
  ranks::on_rank_zero(
      [&] {
        for (const auto& path : numbered_.list()) kind_.remove(path);
        numbered_.remove_latest();
      },
      "clearing the checkpoint directory on rank 0");
}

}  // namespace rankwise::checkpoint::managers
