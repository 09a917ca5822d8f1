#pragma once
/// \file sharded_manager.h
/// A directory of numbered sharded checkpoints with a `latest` pointer: what
/// CheckpointManager is for replicated files, for save_sharded() directories.
///
///   root/checkpoint-0000000200/    (step 200: a DCP directory, see sharded_checkpoint.h)
///   root/latest                    "checkpoint-0000000200\n"
///   root/rankwise.lock             held by rank 0 while the manager lives
///
/// A crash at any point of a save leaves a loadable latest checkpoint; on
/// node-local disks every node's disk gets this layout. The order of a save
/// and the node-local case: docs/sharded-checkpoints.md.

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

/// Example:
/// \code
///   rankwise::checkpoint::ShardedCheckpointManager checkpoints(
///       rankwise::checkpoint::CheckpointManagerOptions("ckpts").keep_last(2).every_n_steps(100));
///   if (checkpoints.load_latest_collective(state)) { ... resume ... }
///   if (checkpoints.should_save(step, epoch_end)) checkpoints.save(state, step);
///   // or, in the background: checkpoints.save_async(state, step); ... checkpoints.wait();
/// \endcode
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

  /// save_sharded(`<directory>/<prefix>-<step, 10 digits>`, state), then
  /// moves `latest` to it and removes the oldest directories beyond
  /// keep_last; returns the new directory's path (an existing step is
  /// replaced atomically). Collective: every rank, same order. Throws
  /// CheckpointError on every rank when any rank fails, leaving `latest` and
  /// the kept checkpoints as they were.
  /// Waits for an asynchronous save in flight first (wait()).
  std::string save(const ShardedState& state, int64_t step);

  /// save(), in the background. Every rank calls it, with its own chunks, as
  /// for save(). It returns once this rank has copied its chunks and
  /// tensors (rank 0 also the replicated ones) into host buffers, after the
  /// two small all_gathers that create the temporary directory; a thread of
  /// each rank then writes, checksums and fsyncs that rank's data file
  /// without communicating. Every rank's outcome is agreed at the next
  /// save_async(), save() or wait() (one all_gather on the training thread,
  /// at a call all ranks make in the same order, which cannot deadlock with
  /// training's own collectives); then the save is published (.metadata,
  /// manifest, rename, `latest`, pruning, as save() does them): by the
  /// next save_async's writer thread with one storage node, at that call
  /// with several. Until then `latest` names the previous checkpoint. At most
  /// one save is in flight. Collective: every rank, same order. Throws
  /// CheckpointError on every rank when the previous asynchronous save
  /// failed on any rank (naming it; the checkpoint before it stays latest),
  /// or when the temporary directory cannot be created. A failure of this
  /// rank's copy is raised at the next call, as a write's is. Extra memory:
  /// one copy of this rank's chunks, kept for the next save. Returns the
  /// path the directory will have.
  /// Details: docs/checkpoints.md#asynchronous-saves.
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
