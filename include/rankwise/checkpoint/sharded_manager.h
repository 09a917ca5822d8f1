#pragma once
/// \file sharded_manager.h
/// A directory of numbered sharded checkpoints with a `latest` pointer: what
/// CheckpointManager is for replicated files, for save_sharded() directories.
///
///   root/checkpoint-0000000200/    (step 200: a DCP directory, see sharded_checkpoint.h)
///   root/latest                    "checkpoint-0000000200\n"
///   root/rankwise.lock             held by rank 0 while the manager lives
///
/// Order of a save, so that a crash (kill -9 of any rank) at any point leaves
/// a loadable latest checkpoint: (1) save_sharded() publishes the step's
/// directory atomically (every rank's file fsynced, then one rename), (2)
/// rank 0 replaces `latest` atomically and durably (temporary file, fsync,
/// rename, directory fsync), (3) only then are directories beyond keep_last
/// removed. A crash before (2) leaves `latest` naming the previous step,
/// which is still there; a save killed mid-way leaves a `.rankwise-tmp.`
/// directory that the next manager's rank 0 removes.
///
/// On node-local disks (save_sharded() finds them out by itself) every node's
/// disk gets this layout: each node's `root/checkpoint-<step>/` holds its own
/// ranks' data files, and steps (2) and (3) are done on each disk by that
/// node's leader (the rank that published it); rank 0's disk alone has the
/// lock. Loads take rank 0's latest() and read across nodes.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint {

/// Example:
/// \code
///   rankwise::checkpoint::ShardedCheckpointManager checkpoints(
///       rankwise::checkpoint::CheckpointManagerOptions("ckpts").keep_last(2).every_n_steps(100));
///   if (checkpoints.load_latest_collective(state)) { ... resume ... }
///   if (checkpoints.should_save(step, epoch_end)) checkpoints.save(state, step);
/// \endcode
class ShardedCheckpointManager {
 public:
  /// Collective (every rank, same order). The options are CheckpointManager's
  /// (directory, keep_last, every_n_steps, at_epoch_end, prefix), checked
  /// alike. Rank 0 creates the directory, takes its lock (a second run using
  /// it at the same time is refused with a CheckpointError naming the
  /// holder) and removes leftovers of a killed save. Throws ConfigError for
  /// bad options, CheckpointError for directory problems, on every rank.
  explicit ShardedCheckpointManager(CheckpointManagerOptions options);
  ~ShardedCheckpointManager();
  ShardedCheckpointManager(const ShardedCheckpointManager&) = delete;
  ShardedCheckpointManager& operator=(const ShardedCheckpointManager&) = delete;

  /// As CheckpointManager::should_save. Local.
  bool should_save(int64_t step, bool epoch_end) const;

  /// save_sharded(`<directory>/<prefix>-<step, 10 digits>`, state), then
  /// rank 0 (on node-local disks, each node's leader, on its disk) moves
  /// `latest` to it and removes the oldest directories beyond keep_last. Collective: every rank, same order (as save_sharded). A
  /// failure on any rank throws CheckpointError on every surviving rank
  /// (naming the rank) and leaves `latest` and the kept checkpoints as they
  /// were. Returns the new directory's path. Saving a step that exists
  /// replaces it atomically.
  std::string save(const ShardedState& state, int64_t step);

  /// The newest complete checkpoint: the one `latest` names, or, when the
  /// pointer is missing or names an incomplete one, the highest-numbered one
  /// that is complete (noted on stderr). Complete means: `.metadata` matches
  /// the manifest's CRC-32 and every data file the manifest names holds the
  /// bytes of its chunks (saved to node-local disks: every file of the
  /// storage nodes whose files are on this disk) (the chunks' own CRC-32s are checked when they are
  /// loaded). nullopt when there is none. Any rank; reads the directory.
  /// Throws CheckpointError when checkpoints exist but none is complete.
  std::optional<std::string> latest() const;

  /// Loads into `state` (load_sharded_collective, at this world size) the
  /// checkpoint rank 0's latest() names, on every rank; returns its path, or
  /// nullopt on every rank when there is none (then `state` is untouched).
  /// A rank gets the bytes of data files its disk lacks (node-local disks)
  /// from a rank that has them, and waits out a stale view of a shared one.
  /// When the load fails on any rank (a chunk's checksum, a file no rank
  /// has, keys or shapes that differ from `state`), every rank throws
  /// CheckpointError naming the checkpoint, the failed rank and its error; nothing older is tried silently (move the damaged directory
  /// aside to resume from the one before). Use it rather than latest() +
  /// load_sharded() on each rank, whose views of the directory may differ
  /// across nodes. Collective: every rank, same order.
  std::optional<std::string> load_latest_collective(ShardedState& state) const;

  /// Paths of the numbered checkpoint directories, oldest first. Any rank.
  std::vector<std::string> checkpoints() const;

  const CheckpointManagerOptions& options() const;

 private:
  std::unique_ptr<managers::ManagerBase> base_;  // what CheckpointManager shares
};

}  // namespace rankwise::checkpoint
