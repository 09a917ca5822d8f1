#pragma once
// What CheckpointManager and ShardedCheckpointManager share, as one object
// each of them holds (a public class cannot derive from a private one): the
// options and their validation, rank 0's lock on the directory, the numbered
// checkpoints and `latest`, the save schedule, the order of a publication
// (`latest`, then pruning) and the resume policy (the newest usable
// checkpoint). Each manager keeps what differs: a file or a directory per
// step, save() or save_sharded(), and how it loads.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/managers/numbered_checkpoints.h"
#include "rankwise/checkpoint/manager.h"

namespace rankwise::checkpoint::io {
class FileLock;
}  // namespace rankwise::checkpoint::io

namespace rankwise::checkpoint::managers {

/// What differs between the managers' checkpoints.
struct ManagedKind {
  /// The manager's class, named in errors ("CheckpointManager").
  std::string who;
  /// ".pt" for files, "" for directories.
  std::string suffix;
  /// What rank 0's opening of the directory is called in errors
  /// ("opening the checkpoint directory on rank 0").
  std::string opening;
  /// Throws CheckpointError when the checkpoint at a path is not usable (latest()).
  std::function<void(const std::string&)> check_usable;
  /// Removes a checkpoint pruned beyond keep_last; errors are ignored.
  std::function<void(const std::string&)> remove;
};

class ManagerBase {
 public:
  /// Collective (every rank, same order). Throws ConfigError (naming
  /// kind.who) for bad options; rank 0 then creates the directory, takes its
  /// lock and removes what a killed writer left, and its CheckpointError is
  /// raised on every rank.
  ManagerBase(CheckpointManagerOptions options, ManagedKind kind);
  ~ManagerBase();
  ManagerBase(const ManagerBase&) = delete;
  ManagerBase& operator=(const ManagerBase&) = delete;

  const CheckpointManagerOptions& options() const { return options_; }

  /// Whether the schedule asks for a save after step `step` (1-based), given an epoch end. Local.
  bool should_save(int64_t step, bool epoch_end) const;

  /// Paths of the numbered checkpoints, oldest first. Any rank.
  std::vector<std::string> checkpoints() const;

  /// The newest checkpoint that kind.check_usable accepts (NumberedCheckpoints::newest_usable).
  std::optional<std::string> latest() const;

  /// The newest checkpoint for which `use` does not throw CheckpointError.
  std::optional<std::string> newest_usable(const std::function<void(const std::string&)>& use) const;

  /// The path of step `step`'s checkpoint; throws ConfigError when `step` < 0.
  /// At the first save, rank 0 notes on stderr when the directory already
  /// holds higher steps (an earlier run's): keep_last would remove this
  /// run's checkpoints first.
  std::string path_for_save(int64_t step) const;

  /// Throws CheckpointError on rank 0 when it does not hold the directory's lock (a bug).
  void check_lock() const;

  /// After the checkpoint at `path` is durable, on the rank that keeps this
  /// disk: replaces `latest` with it, then removes the oldest checkpoints
  /// beyond keep_last (never `path`). Fault points before-latest and before-prune.
  void point_latest_and_prune(const std::string& path) const;
  /// The two halves of point_latest_and_prune, for a caller that prunes
  /// later (a sharded save_async, on its writer thread).
  void point_latest(const std::string& path) const;
  void prune(const std::string& path) const;

  /// Removes every numbered checkpoint and `latest`, on rank 0. Collective,
  /// as ranks::on_rank_zero.
  void clear() const;

 private:
  // path_for_save's note about an earlier run's higher steps (rank 0).
  void note_higher_steps(int64_t step) const;

  CheckpointManagerOptions options_;
  ManagedKind kind_;
  NumberedCheckpoints numbered_;
  std::unique_ptr<io::FileLock> lock_;  // rank 0 only
  mutable bool saved_before_ = false;  // path_for_save's check runs once
};

}  // namespace rankwise::checkpoint::managers
