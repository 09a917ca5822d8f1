#pragma once
// Strategy "fsdp" (Lightning Fabric's "fsdp"; ZeRO-3, or ZeRO-2 without
// reshard_after_forward): the model in FullyShardedDataParallel
// (FabricOptions::fsdp): parameters, gradients and optimizer state sharded
// across the ranks, the user's optimizer built over this rank's shards
// (the FabricModule's parameters()). Checkpoints are sharded: the model under
// "model.<name>", the optimizer's state under "optim.", each rank its rows.
#include "fabric/strategy.h"

namespace rankwise::fabric {

class FsdpStrategy : public Strategy {
 public:
  const char* name() const override { return "fsdp"; }
  bool shards_parameters() const override { return true; }
  bool sharded_checkpoints() const override { return true; }
  // Throws ConfigError, saying what to do, unless `optimizer` holds exactly
  // the shards (an optimizer over the unsharded parameters).
  void set_optimizer(torch::optim::Optimizer& optimizer) override;
  void after_backward() override;
  bool accumulating() const override { return accumulated_; }
  torch::Tensor clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                               amp::GradScaler* scaler) override;
  bool step(amp::GradScaler* scaler) override;
  checkpoint::ShardedState sharded_state_dict() const override;
  checkpoint::ShardedState sharded_state_dict_to_load(const StoredKeys& stored) const override;
  void load_sharded_state_dict(const checkpoint::ShardedState& loaded) override;

 private:
  parallel::fsdp::ShardingEngine& engine() const { return *model_.sharding; }

  // The last backward ran under no_sync(): its gradients are unsharded and
  // not yet reduced.
  bool accumulated_ = false;
};

}  // namespace rankwise::fabric
