#pragma once
/// \file zero_redundancy_optimizer.h
/// A sharded optimizer (ZeRO stage 1, as PyTorch's
/// torch.distributed.optim.ZeroRedundancyOptimizer): every rank keeps the
/// optimizer state (Adam's exp_avg and exp_avg_sq, SGD's momentum, ...) of
/// its own partition of the parameters only, steps that partition, and then
/// each rank's updated parameters are broadcast from it, so every replica
/// stays bitwise equal while the state takes about 1/world_size of the memory
/// on each rank.
///
/// Usage (every rank), with DistributedDataParallel averaging the gradients:
/// \code
///   rankwise::parallel::DistributedDataParallel ddp(model);
///   rankwise::parallel::ZeroRedundancyOptimizer opt(ddp.parameters(), [](auto groups) {
///     return std::make_unique<torch::optim::Adam>(std::move(groups),
///                                                 torch::optim::AdamOptions(1e-3));
///   });
///   for (...) {
///     opt.zero_grad();
///     loss_of(ddp.forward(x)).backward();
///     opt.step();  // collective: every rank
///   }
/// \endcode
///
/// Partition (PyTorch's rule, ZeroRedundancyOptimizer._partition_parameters):
/// group by group, the parameters sorted by number of elements, largest
/// first (ties in their given order), each go to the rank with the fewest
/// elements so far (ties: the lowest rank), the totals carried across groups.
/// Each parameter's update depends only on its own gradient and state for the
/// optimizers libtorch ships (SGD, Adam, AdamW, RMSprop, Adagrad), so a step
/// gives the values the unsharded optimizer gives. LBFGS (which needs the
/// whole parameter vector) is not supported.

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

  /// `params`: one group. Collective: every rank constructs it at the same
  /// point with the same parameters (same shapes, dtypes and order), e.g.
  /// `ddp.parameters()`. Parameters that are not leaves requiring grad are
  /// kept and never stepped, as in torch.optim. Throws ConfigError when the
  /// list is empty, a parameter is given twice or is undefined, or the
  /// ranks' parameter shapes differ (one all_gather of their count and
  /// element total checks it), or a group has no parameters.
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

  /// Clips the gradients by their global norm, as clip_grad_norm()
  /// (rankwise/parallel/clip_grad.h) and PyTorch's clip_grad_norm_ do, for
  /// gradients DDP averaged (the same on every rank): each rank computes the
  /// part of the norm of the parameters it owns (the sum of their norms^p, or
  /// their largest for norm_type infinity), one all_reduce of one or two
  /// elements combines the parts, and every rank scales all gradients by
  /// min(max_norm / (total + 1e-6), 1). Returns the total norm (before
  /// clipping), 0-dim, in the gradients' dtype, on the first gradient's
  /// device; the same on every rank. Collective: every rank, same order.
  /// Throws ConfigError (on every rank, before communicating) for a negative
  /// or nan max_norm or a norm_type <= 0; with `error_if_nonfinite`, Error
  /// on every rank when the total norm is inf or nan.
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

  /// The whole optimizer's state_dict, as the unsharded optimizer would
  /// give it (checkpoint/state/optimizer_state.h: Python's layout, parameters
  /// indexed in the order given, groups in order), on every rank: every
  /// rank's share is gathered (pickled; every rank holds the whole state for
  /// the time of the call, as PyTorch's consolidate_state_dict does on its
  /// `to` rank). Save it with rankwise::checkpoint::save from any world size; it loads
  /// into a ZeroRedundancyOptimizer at any world size, or into the plain
  /// optimizer. Collective: every rank, same order. Throws CheckpointError
  /// for an optimizer type optimizer_state_dict() does not know.
  c10::IValue state_dict() const;

  /// Restores a state_dict() (from any world size) or the plain optimizer's
  /// optimizer_state_dict() / Python's `optimizer.state_dict()`: this rank
  /// takes the options of every group it has a share of and the state of the
  /// parameters it owns. No communication; call it on every rank. Throws
  /// CheckpointError naming the group when the numbers of groups or of
  /// parameters in a group differ, and what load_optimizer_state_dict()
  /// throws (shapes, missing keys).
  void load_state_dict(const c10::IValue& state_dict);

  /// This rank's share of the optimizer state as entries of a sharded
  /// checkpoint, for save_sharded() (checkpoint/sharded_checkpoint.h): no
  /// rank gathers the state, each rank writes only its own partition's.
  /// Keys (DCP's flattening of state_dict(), levels joined by dots):
  ///   "<prefix>state.<i>.<name>"   a ShardedTensor per state tensor of
  ///       parameter i (indexed as state_dict() indexes; Adam: step [] float32,
  ///       exp_avg and exp_avg_sq of the parameter's shape and dtype): its
  ///       owning rank holds the whole tensor as its one chunk (the
  ///       optimizer's own tensor when on the CPU, else a CPU copy), every
  ///       other rank no chunk;
  ///   "<prefix>param_groups.<g>.<option>"   an ObjectEntry per option of
  ///       group g (lr, betas, eps, ...) and "params", its parameters' indices,
  ///       as state_dict() holds them.
  /// Save it before the next step(). Collective: every rank, same order (one
  /// all_gather of each rank's state keys, shapes and dtypes and its groups'
  /// options; no tensor data). Throws CheckpointError for an optimizer type
  /// optimizer_state_dict() does not know.
  checkpoint::ShardedState sharded_state_dict(const std::string& prefix = "optim.") const;

  /// Targets for load_sharded() of the entries under `prefix` of a sharded
  /// checkpoint whose keys are `stored` (read_sharded_metadata()), at this
  /// world size, saved at any: a zero-filled CPU chunk for every state tensor
  /// of the parameters this rank owns now, no chunk for the others, and an
  /// empty ObjectEntry per option. Add them to the ShardedState you load (with
  /// the model's entries), load it, then call load_sharded_state_dict(). Local
  /// (no communication). Throws CheckpointError when no key has `prefix`, or
  /// a key under it is not of the two forms above or names a parameter or
  /// group this optimizer does not have.
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
