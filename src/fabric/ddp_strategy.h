#pragma once
// Strategy "ddp" (Lightning Fabric's "ddp"): the model replicated on every
// rank in DistributedDataParallel, gradients all_reduced in backward, the
// user's optimizer stepped on every rank, replicated checkpoints.
#include "fabric/strategy.h"

namespace rankwise::fabric {

class DdpStrategy : public Strategy {
 public:
  const char* name() const override { return "ddp"; }
  bool sharded_checkpoints() const override { return false; }
  // Refuses (ConfigError, every rank) an optimizer that holds other tensors
  // than the model's parameters, or other ones on different ranks. Collective.
  void set_optimizer(torch::optim::Optimizer& optimizer) override;
  bool accumulating() const override;
  void end_pass() override;
  torch::Tensor clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                               amp::GradScaler* scaler) override;
  bool step(amp::GradScaler* scaler) override;
  void check_replicas() override;
};

}  // namespace rankwise::fabric
