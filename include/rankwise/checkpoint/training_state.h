#pragma once
/// \file training_state.h
/// Everything a run needs to continue as if it had never stopped, gathered
/// into one replicated Checkpoint (written by rank 0) and restored on every
/// rank. Its entries ("format": "rankwise.training_state/2", "model",
/// "optimizer", ...) and what restore() does with each:
/// docs/checkpoints.md#exact-resume.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <map>
#include <string>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/data/distributed_sampler.h"

namespace rankwise::metrics {
class MetricCollection;
}  // namespace rankwise::metrics

namespace rankwise::checkpoint {

/// What a checkpoint captures. Pointers may be null: absent parts are neither
/// saved nor restored. Model and optimizer must be the same on every rank
/// (data parallelism); RNG and metric states are per rank.
struct TrainingState {
  /// The unwrapped module (`ddp.module()`), so keys carry no "module." prefix.
  torch::nn::Module* model = nullptr;
  /// SGD, Adam, AdamW, RMSprop or Adagrad: its per-parameter state and every
  /// param_group's options are restored exactly.
  torch::optim::Optimizer* optimizer = nullptr;
  /// A libtorch scheduler of `optimizer` (e.g. torch::optim::StepLR): its step
  /// count is restored. Hand-written schedules: see lr_scheduler_state.h.
  /// Restoring a checkpoint that has a scheduler state with this unset
  /// restores the learning rates but not the count (rank 0 prints a note).
  torch::optim::LRScheduler* lr_scheduler = nullptr;
  /// Optimizer steps taken so far (the same on every rank).
  int64_t step = 0;
  /// The current epoch, 0-based (the sampler's epoch: call set_epoch(epoch)).
  int64_t epoch = 0;
  /// Where the sampler stands within the epoch: indices of this epoch already
  /// consumed by each rank (0 at an epoch boundary), counted from the start
  /// of the current stretch (see epoch_stretches).
  int64_t position = 0;
  /// The current epoch's earlier stretches, in order, when a run resumed it at another world
  /// size (restore() appends the checkpoint's world size and position, and sets position to 0):
  /// pass them to DistributedSampler::resume_epoch() after set_epoch(epoch). Empty when the
  /// epoch ran at one world size. Clear it, with position, at each epoch's start.
  std::vector<data::DistributedSampler::Stretch> epoch_stretches;
  /// Metric collections whose per-rank states (e.g. a partial epoch's sums)
  /// are kept, by name.
  std::map<std::string, metrics::MetricCollection*> metrics;
  /// User entries (tensor, integer, double, string, ...), saved from rank 0.
  std::map<std::string, c10::IValue> extras;
};

/// Builds the checkpoint of `state`, including this process's RNG states.
/// Collective (every rank, same order): per-rank states travel to every rank
/// in two all_gathers, so the result (identical on every rank) can be passed
/// to save() or CheckpointManager::save(). Like state_dict(), its "model"
/// entry aliases the live parameters: save it before the next optimizer
/// step. Throws CheckpointError.
Checkpoint capture(const TrainingState& state);

/// Restores everything capture() saved into `state` (parameters and buffers onto their devices,
/// optimizer, scheduler, step, epoch, position, epoch_stretches, this rank's RNG and metric
/// states, extras); at another world size per-rank states are left at an epoch end and merged
/// mid-epoch. Every rank, checkpoint on the CPU; no communication. Throws CheckpointError when
/// it is not a training state, does not match the model, optimizer type or scheduler, or has
/// not one per-rank state per saved rank. See docs/checkpoints.md.
void restore(const Checkpoint& checkpoint, TrainingState& state);

}  // namespace rankwise::checkpoint
