#include "fabric/ddp_strategy.h"

#include "rankwise/amp/grad_scaler.h"
#include "rankwise/parallel/clip_grad.h"

namespace rankwise::fabric {

bool DdpStrategy::accumulating() const { return model_.accumulating && model_.accumulating(); }

void DdpStrategy::end_pass() {
  if (model_.join) model_.join();  // every rank, after its last batch
}

torch::Tensor DdpStrategy::clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                                          amp::GradScaler* scaler) {
  if (scaler) scaler->unscale_(optimizer());
  // DDP made every rank's gradients the same: each clips alike, locally.
  return parallel::clip_grad_norm(module().parameters(), max_norm, norm_type, error_if_nonfinite);
}

bool DdpStrategy::step(amp::GradScaler* scaler) {
  const bool stepped = step_through(optimizer(), scaler);
  optimizer().zero_grad();
  return stepped;
}

void DdpStrategy::check_replicas() {
  if (model_.check_replicas) model_.check_replicas();
}

}  // namespace rankwise::fabric
