#pragma once
/// \file manager.h
/// A directory of numbered checkpoints (dir/checkpoint-0000000200.pt, torch.load-able) with a
/// `latest` pointer and rankwise.lock (held by rank 0): save every N steps and/or at epoch
/// ends, keep the last K, resume from the newest that verifies. A crash at any point of a save
/// leaves a loadable latest checkpoint. See docs/checkpoints.md#what-the-guarantees-are.

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rankwise/checkpoint/checkpoint.h"

namespace rankwise::checkpoint::managers {
class ManagerBase;
}  // namespace rankwise::checkpoint::managers
namespace rankwise::checkpoint::async {
class BackgroundSave;
class HostSnapshot;
}  // namespace rankwise::checkpoint::async

namespace rankwise::checkpoint {

/// Options of CheckpointManager (setters and getters as torch::nn options), e.g.
/// CheckpointManagerOptions("ckpts").keep_last(5).every_n_steps(1000).
struct CheckpointManagerOptions {
  explicit CheckpointManagerOptions(std::string directory) : directory_(std::move(directory)) {}
  /// The directory of the checkpoints (created by rank 0 if needed).
  TORCH_ARG(std::string, directory);
  /// Checkpoints to keep, newest first (at least 1; default 3).
  TORCH_ARG(int64_t, keep_last) = 3;
  /// Save every N optimizer steps (0: never by step count; default 0).
  TORCH_ARG(int64_t, every_n_steps) = 0;
  /// Save at each epoch end (default true).
  TORCH_ARG(bool, at_epoch_end) = true;
  /// File name prefix (default "checkpoint").
  TORCH_ARG(std::string, prefix) = "checkpoint";
};

class CheckpointManager {
 public:
  /// Collective (every rank, same order). Rank 0 creates the directory if
  /// needed, takes its lock (a second run using the same directory at the
  /// same time is refused with a CheckpointError naming the holder) and
  /// removes temporary files left by a writer that was killed. Throws
  /// ConfigError for bad options, CheckpointError for directory problems, on
  /// every rank.
  explicit CheckpointManager(CheckpointManagerOptions options);
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  /// Whether the schedule asks for a save after optimizer step `step` (1-based
  /// count of steps taken), given whether an epoch just ended. Local.
  bool should_save(int64_t step, bool epoch_end) const;

  /// Saves `state` as the checkpoint of step `step`, updates `latest`, then
  /// prunes beyond keep_last. Collective, like rankwise::checkpoint::save(): rank 0
  /// writes, every rank returns after the pointer is durable, and a failure
  /// raises the same CheckpointError on every rank with the previous
  /// checkpoints untouched. Returns the new file's path.
  /// Waits for an asynchronous save in flight first (wait()).
  std::string save(const Checkpoint& state, int64_t step);

  /// save(), in the background: returns once rank 0 has copied `state` into host buffers (CUDA
  /// tensors into pinned ones); a thread of rank 0 then writes it in save()'s order. One save in
  /// flight: this call first waits for the previous. Collective (every rank, same order). Throws
  /// CheckpointError on every rank when the previous async save or the copy failed. Extra
  /// memory: one copy of `state` on rank 0. Returns the path the file will have.
  /// See docs/checkpoints.md#asynchronous-saves.
  std::string save_async(const Checkpoint& state, int64_t step);

  /// Waits for the asynchronous save in flight, if any, and throws its
  /// failure as a CheckpointError on every rank. Collective (every rank, same
  /// order). save(), save_async() and clear() call it first; call it before
  /// the run ends: the destructor waits too, but can only print a failure.
  void wait();

  /// Timings of the last save(), save_async() or wait(), in milliseconds:
  /// how long this rank waited for the asynchronous save before it, and how
  /// long the call blocked in all (that wait included). Local.
  struct Timings {
    double waited_ms = 0;
    double blocked_ms = 0;
  };
  Timings last_timings() const { return timings_; }

  /// The newest checkpoint that verifies: the one `latest` names, or, when
  /// the pointer is missing or names a file that fails verification (corrupt,
  /// truncated, missing), the highest-numbered file that verifies (rank 0
  /// notes it on stderr). nullopt when there is none. Any rank; reads the
  /// directory. Throws CheckpointError when files exist but none verifies.
  std::optional<std::string> latest() const;

  /// The checkpoint latest() would name, loaded onto the CPU (reading and
  /// verifying it once), or nullopt when there is none; its path goes to
  /// `path` when given. Any rank (typically every rank). Throws as latest().
  std::optional<Checkpoint> load_latest(std::string* path = nullptr) const;

  /// The checkpoint rank 0's latest() names, loaded onto the CPU on every
  /// rank from the same bytes (as load_collective(): stale views waited for
  /// up to `options.stale_timeout`, node-local disks sent to), or nullopt on
  /// every rank when rank 0 finds none; the path goes to `path` when given.
  /// Use it to resume on several nodes. Collective: every rank, same order.
  /// Throws CheckpointError as latest() does, on every rank.
  std::optional<Checkpoint> load_latest_collective(std::string* path = nullptr,
                                                   CollectiveLoadOptions options = {}) const;

  /// Paths of the numbered checkpoints, oldest first. Any rank.
  std::vector<std::string> checkpoints() const;

  /// Removes every numbered checkpoint and the `latest` pointer, e.g. when a
  /// new run starts in a directory that holds an earlier run's files (whose
  /// higher step numbers would otherwise win the fallback of latest()).
  /// Collective, like save().
  /// Waits for an asynchronous save in flight first (wait()).
  void clear();

  const CheckpointManagerOptions& options() const;

 private:
  void finish_background_save();  // rank 0: waits for it and rethrows its failure

  std::unique_ptr<managers::ManagerBase> base_;  // what ShardedCheckpointManager shares
  std::unique_ptr<async::HostSnapshot> snapshot_;  // rank 0, from the first save_async
  std::unique_ptr<async::BackgroundSave> background_;  // declared last: joined first
  bool in_flight_ = false;  // every rank: a save_async not yet waited for
  std::string in_flight_path_;
  Timings timings_;
};

}  // namespace rankwise::checkpoint
