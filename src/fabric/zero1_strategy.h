#pragma once
// Strategy "zero1" (ZeRO stage 1; Lightning Fabric's DeepSpeed stage 1): the
// model replicated in DistributedDataParallel as under "ddp", the
// optimizer's state sharded: a ZeroRedundancyOptimizer built from the user's
// optimizer (its type, and each group's options) steps each rank's share of
// the parameters and broadcasts them, instead of the user's optimizer.
// Checkpoints are sharded: the model replicated under "model.", each rank's
// share of the optimizer's state under "optim.".
#include <memory>
#include <vector>

#include "fabric/ddp_strategy.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"

namespace rankwise::fabric {

class Zero1Strategy : public DdpStrategy {
 public:
  const char* name() const override { return "zero1"; }
  bool sharded_checkpoints() const override { return true; }
  // Builds the ZeroRedundancyOptimizer (collective). Throws ConfigError for
  // an optimizer type it cannot rebuild over a share of the parameters.
  void set_optimizer(torch::optim::Optimizer& optimizer) override;
  torch::Tensor clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                               amp::GradScaler* scaler) override;
  bool step(amp::GradScaler* scaler) override;
  checkpoint::ShardedState sharded_state_dict() const override;
  checkpoint::ShardedState sharded_state_dict_to_load(const StoredKeys& stored) const override;
  void load_sharded_state_dict(const checkpoint::ShardedState& loaded) override;

 private:
  // The user's groups' options (a learning-rate scheduler changes those)
  // into the local optimizer's groups: before each step, and before a save
  // (a scheduler stepped since the last step is in the checkpoint, as the
  // user's optimizer holds it under ddp).
  void copy_options() const;

  std::unique_ptr<parallel::ZeroRedundancyOptimizer> zero_;
  // For each group of this rank's local optimizer, the user's group it holds a share of.
  std::vector<std::size_t> user_group_of_;
};

/// ZeroRedundancyOptimizer's factory for an optimizer of `optimizer`'s type
/// (SGD, Adam, AdamW, RMSprop or Adagrad) with its defaults. Throws
/// ConfigError naming the supported types for another.
parallel::ZeroRedundancyOptimizer::Factory same_optimizer_factory(const torch::optim::Optimizer& optimizer);

/// The learning rates of a sharded checkpoint's "<prefix>param_groups.<g>.lr"
/// entries (loaded) into `optimizer`'s groups, as a replicated resume
/// restores them with the optimizer's state.
void restore_learning_rates(torch::optim::Optimizer& optimizer, const checkpoint::ShardedState& loaded,
                            const std::string& prefix);

}  // namespace rankwise::fabric
