#pragma once
/// \file sharded_manager.h
/// What CheckpointManager is for replicated files, for save_sharded() directories:
/// root/checkpoint-0000000200/ (a DCP directory), root/latest, root/rankwise.lock (rank 0).
/// A crash at any point of a save leaves a loadable latest checkpoint; with node-local disks
/// every node's disk gets this layout. See docs/sharded-checkpoints.md.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint::sharded {
class ShardedSave;
}  // namespace rankwise::checkpoint::sharded

namespace rankwise::checkpoint {

/// Numbered sharded checkpoints, e.g. ShardedCheckpointManager(CheckpointManagerOptions("ckpts")
/// .keep_last(2)); then load_latest_collective(state), should_save(), save() or save_async().
class ShardedCheckpointManager {
 public:
  /// Collective (every rank, same order): rank 0 creates the directory, takes
  /// its lock and removes leftovers of a killed save. The options are
  /// CheckpointManager's, checked alike. Throws ConfigError for bad options,
  /// CheckpointError for directory problems (a second run holding the lock
  /// is named), on every rank.
  explicit ShardedCheckpointManager(CheckpointManagerOptions options);
  ~ShardedCheckpointManager();
  ShardedCheckpointManager(const ShardedCheckpointManager&) = delete;
  ShardedCheckpointManager& operator=(const ShardedCheckpointManager&) = delete;

  /// As CheckpointManager::should_save. Local.
  bool should_save(int64_t step, bool epoch_end) const;

  /// save_sharded(`<directory>/<prefix>-<step, 10 digits>`, state), then moves `latest` to it
  /// and prunes beyond keep_last (an existing step is replaced atomically); waits for an async
  /// save in flight first. Returns the path. Collective: every rank, same order. Throws
  /// CheckpointError on every rank when any rank fails, `latest` and kept ones unchanged.
  std::string save(const ShardedState& state, int64_t step);

  /// save(), in the background: returns once this rank copied its chunks into host buffers
  /// (after two small all_gathers); a thread then writes its data file without communicating.
  /// Outcomes are agreed, and the save published, at the next save_async(), save() or wait();
  /// till then `latest` is the previous. One in flight. Collective: every rank, same order.
  /// Throws CheckpointError on every rank when the previous async save failed on any rank or
  /// the temporary directory cannot be made. See docs/checkpoints.md#sharded.
  std::string save_async(const ShardedState& state, int64_t step);

  /// Waits for the asynchronous save in flight, if any, then publishes it;
  /// throws its failure (any rank's) as a CheckpointError on every rank.
  /// Collective (every rank, same order). save() and save_async() call it
  /// first; call it before the run ends (the destructor publishes a save
  /// still in flight, collectively, but can only print a failure).
  void wait();

  /// As CheckpointManager::Timings: of the last save(), save_async() or wait() on this rank.
  using Timings = CheckpointManager::Timings;
  Timings last_timings() const { return timings_; }

  /// The newest complete checkpoint (`.metadata` matches the manifest, every
  /// data file there is long enough; chunks' CRC-32s are left to the load):
  /// the one `latest` names, else the highest-numbered complete one (noted on
  /// stderr); nullopt when there is none. Any rank; reads the directory.
  /// Throws CheckpointError when checkpoints exist but none is complete.
  std::optional<std::string> latest() const;

  /// Loads the checkpoint rank 0's latest() names into `state` on every rank
  /// (load_sharded_collective()); returns its path, or nullopt on every rank
  /// when there is none (`state` untouched). Collective: every rank, same
  /// order. Throws CheckpointError on every rank, naming the checkpoint, the
  /// failed rank and its error, when the load fails anywhere; nothing older
  /// is tried (move a damaged directory aside to resume from the one before).
  std::optional<std::string> load_latest_collective(ShardedState& state) const;

  /// Paths of the numbered checkpoint directories, oldest first. Any rank.
  std::vector<std::string> checkpoints() const;

  const CheckpointManagerOptions& options() const;

 private:
  // After a publication, collective: `latest` on each storage node's
  // leader, and pruning now or (prune_now false) on the next save's writer
  // thread (prune_after_).
  void point_latest(const std::string& path, bool leads, bool prune_now);
  // The save in flight, its writer finished: every rank's outcome agreed (a
  // failure raised on every rank, naming the save), then published,
  // collectively, pruning now (or later, with `defer`). With `defer` and one
  // storage node it is not published here: its leader gets it back, to
  // publish on the next writer thread; the other ranks get nullptr.
  std::unique_ptr<sharded::ShardedSave> agree_in_flight(bool defer);

  std::unique_ptr<managers::ManagerBase> base_;  // what CheckpointManager shares
  std::unique_ptr<async::HostSnapshot> snapshot_;  // from the first save_async
  std::unique_ptr<sharded::ShardedSave> in_flight_;  // every rank: a save_async not yet published
  std::string prune_after_;  // a leader: the checkpoint published last, its pruning still to do
  std::unique_ptr<async::BackgroundSave> background_;  // declared last: joined first
  Timings timings_;
};

}  // namespace rankwise::checkpoint
