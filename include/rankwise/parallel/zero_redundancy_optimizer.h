#pragma once
/// \file zero_redundancy_optimizer.h
/// A sharded optimizer (ZeRO stage 1, as torch.distributed.optim.ZeroRedundancyOptimizer):
/// each rank keeps the state of its own partition of the parameters (zero_partition, PyTorch's
/// rule), steps it, and broadcasts the updated parameters, so replicas stay bitwise equal with
/// about 1/world_size of the state per rank. SGD, Adam, AdamW, RMSprop, Adagrad; not LBFGS.
/// See docs/ddp-and-zero.md#zeroredundancyoptimizer.

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/checkpoint/sharded_metadata.h"

namespace rankwise::parallel {

/// Rank of each parameter (same order as the flattened `groups`, group 0's
/// parameters first) under ZeroRedundancyOptimizer's partition rule for
/// `world_size` ranks, from each parameter's number of elements. No
/// communication. Throws ConfigError when world_size < 1.
std::vector<int> zero_partition(const std::vector<std::vector<int64_t>>& group_numels,
                                int world_size);

class ZeroRedundancyOptimizer {
 public:
  /// Builds this rank's optimizer from its share of the parameter groups:
  /// each group keeps its options (a copy) and only the parameters this rank
  /// owns; groups with none are left out. Called once, on every rank with a
  /// share (not on a rank that owns no parameter).
  using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(
      std::vector<torch::optim::OptimizerParamGroup> local_groups)>;

  /// `params`: one group. Collective: every rank, same point, same parameters (shapes, dtypes,
  /// order), e.g. `ddp.parameters()`; non-leaf or no-grad ones are kept, never stepped. Throws
  /// ConfigError for an empty list, a parameter twice or undefined, a group with no
  /// parameters, or shapes that differ between ranks (one all_gather checks them).
  ZeroRedundancyOptimizer(std::vector<torch::Tensor> params, Factory make_optimizer);
  /// Several groups, each with its own options (or the factory's defaults).
  ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups,
                          Factory make_optimizer);

  /// Steps this rank's partition with its optimizer, then broadcasts every
  /// rank's updated parameters from their owner (one broadcast per rank and
  /// dtype, of its parameters flattened). Collective: every rank, same
  /// order. Parameters without a gradient are left as the optimizer leaves
  /// them (unchanged) and still broadcast.
  void step();

  /// Clips the gradients by their global norm, as clip_grad_norm() (parallel/clip_grad.h), for
  /// gradients DDP averaged: each rank takes its owned part, one all_reduce of 1-2 elements
  /// combines them. Returns the total norm before clipping (0-dim, the gradients' dtype, the
  /// first gradient's device), the same on every rank. Collective: every rank, same order.
  /// Throws ConfigError (before communicating) for a negative or nan max_norm or norm_type <= 0;
  /// with `error_if_nonfinite`, Error on every rank for an inf or nan norm.
  torch::Tensor clip_grad_norm(double max_norm, double norm_type = 2.0,
                               bool error_if_nonfinite = false);

  /// Resets the gradient of every parameter (not only this rank's): to
  /// undefined with `set_to_none` (the default of PyTorch 2.x), else to zero.
  /// No communication.
  void zero_grad(bool set_to_none = true);

  /// This rank's optimizer (for learning-rate schedulers: give each rank's
  /// scheduler its local_optimizer(); every rank then sets the same rates).
  /// Throws ConfigError on a rank that owns no parameter.
  torch::optim::Optimizer& local_optimizer();
  bool has_local_optimizer() const { return local_ != nullptr; }

  /// Every parameter, in the order given (flattened over groups).
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  /// The owning rank of parameters()[i].
  int owner(std::size_t i) const { return owner_.at(i); }
  /// Indices into parameters() owned by `rank`.
  std::vector<std::size_t> owned_by(int rank) const;

  /// The whole optimizer's state_dict as the unsharded optimizer would give it (Python's
  /// layout, parameters in the order given), on every rank: every share is gathered (pickled).
  /// Loads into a ZeroRedundancyOptimizer at any world size, or into the plain optimizer.
  /// Collective: every rank, same order. Throws CheckpointError for an optimizer type
  /// optimizer_state_dict() does not know.
  c10::IValue state_dict() const;

  /// Restores a state_dict() (from any world size) or the plain optimizer's / Python's
  /// state_dict: this rank takes its groups' options and its parameters' state. Local; call
  /// on every rank. Throws CheckpointError naming the group when the numbers of groups or
  /// parameters differ, and what load_optimizer_state_dict() throws (shapes, missing keys).
  void load_state_dict(const c10::IValue& state_dict);

  /// This rank's share of the state as sharded-checkpoint entries for save_sharded(), without
  /// gathering: "<prefix>state.<i>.<name>" ShardedTensors (the owner holds the whole tensor as
  /// its one CPU chunk, other ranks none) and "<prefix>param_groups.<g>.<option>" ObjectEntries.
  /// Save it before the next step(). Collective: every rank, same order (one all_gather of
  /// keys, shapes, dtypes and options). Throws CheckpointError for an unknown optimizer type.
  /// See docs/sharded-checkpoints.md#sharded-optimizer-state-zeroredundancyoptimizer.
  checkpoint::ShardedState sharded_state_dict(const std::string& prefix = "optim.") const;

  /// Targets for load_sharded() of the entries under `prefix` of a checkpoint whose keys are
  /// `stored` (read_sharded_metadata()), saved at any world size: zero-filled CPU chunks for the
  /// state this rank owns now, empty ObjectEntries for options; load them, then call
  /// load_sharded_state_dict(). Local. Throws CheckpointError when no key has `prefix`, or one
  /// is malformed or names a parameter or group this optimizer lacks.
  checkpoint::ShardedState sharded_state_dict_to_load(const std::map<std::string, checkpoint::ShardedEntryMetadata>& stored,
                                          const std::string& prefix = "optim.") const;

  /// Restores the state from the entries of sharded_state_dict_to_load()
  /// once load_sharded() filled them: builds the state_dict and calls
  /// load_state_dict() (so its checks and errors hold). Local (no
  /// communication); call it on every rank. Throws CheckpointError when
  /// the entries were never filled (load_sharded() not called on them).
  void load_sharded_state_dict(const checkpoint::ShardedState& loaded, const std::string& prefix = "optim.");

  /// Bytes of this rank's optimizer state tensors (the per-parameter state:
  /// exp_avg, exp_avg_sq, momentum buffers, step counters). No communication.
  std::int64_t local_state_bytes() const;

 private:
  void init(std::vector<torch::optim::OptimizerParamGroup> groups, Factory& make_optimizer);
  /// {"state": {parameter index: this rank's state}, "param_groups": {group index: options}}.
  c10::impl::GenericDict local_share() const;
  /// Every group's options (the lowest rank's that has a share) with its "params", from all ranks' local_share().
  c10::List<c10::IValue> merged_param_groups(const c10::List<c10::IValue>& shares) const;

  std::vector<torch::Tensor> params_;
  std::vector<int> owner_;
  std::vector<std::vector<std::size_t>> group_params_;  // per group: indices into params_
  std::vector<std::size_t> local_group_of_;  // per local group: its index among the groups
  std::vector<std::size_t> local_params_;    // per local parameter: its index in params_
  std::unique_ptr<torch::optim::Optimizer> local_;
};

}  // namespace rankwise::parallel
