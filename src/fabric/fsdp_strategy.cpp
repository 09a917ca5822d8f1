#include "fabric/fsdp_strategy.h"

#include <string>

#include "core/check.h"
#include "rankwise/amp/grad_scaler.h"
#include "rankwise/error.h"
#include "rankwise/parallel/fully_sharded.h"

namespace rankwise::fabric {

void FsdpStrategy::set_optimizer(torch::optim::Optimizer& optimizer) {
  try {
    engine().check_optimizer(optimizer);
  } catch (const ConfigError& error) {
    core::raise<ConfigError>(
        core::here(),
        "Fabric::setup_optimizers under strategy fsdp: the optimizer does not hold this rank's "
        "shards of the parameters ({}); build it after setup_module, over the returned model's "
        "parameters() (`auto model = fabric.setup_module(net); torch::optim::AdamW "
        "optimizer(model.parameters(), ...); fabric.setup_optimizers(optimizer);`), not over the "
        "unwrapped module's",
        reason_of(error));
  }
  Strategy::set_optimizer(optimizer);
}

void FsdpStrategy::after_backward() { accumulated_ = !engine().require_sync(); }

torch::Tensor FsdpStrategy::clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                                           amp::GradScaler* scaler) {
  if (scaler) scaler->unscale_(optimizer());
  return engine().clip_grad_norm(max_norm, norm_type, error_if_nonfinite);  // collective
}

bool FsdpStrategy::step(amp::GradScaler* scaler) {
  const bool stepped = step_through(optimizer(), scaler);
  optimizer().zero_grad();
  return stepped;
}

checkpoint::ShardedState FsdpStrategy::sharded_state_dict() const {
  auto state = engine().sharded_state_dict(kModelPrefix);
  if (has_optimizer()) state.merge(parallel::fsdp_optimizer_state_dict(engine(), optimizer(), kOptimizerPrefix));
  return state;
}

checkpoint::ShardedState FsdpStrategy::sharded_state_dict_to_load(const StoredKeys& stored) const {
  auto state = engine().sharded_state_dict_to_load(kModelPrefix);
  if (has_optimizer()) state.merge(parallel::fsdp_optimizer_state_dict_to_load(engine(), stored, kOptimizerPrefix));
  return state;
}

void FsdpStrategy::load_sharded_state_dict(const checkpoint::ShardedState& loaded) {
  engine().load_sharded_state_dict(loaded, kModelPrefix);
  if (has_optimizer()) parallel::load_fsdp_optimizer_state_dict(engine(), optimizer(), loaded, kOptimizerPrefix);
}

}  // namespace rankwise::fabric
