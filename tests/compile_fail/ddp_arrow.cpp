// Must NOT compile: `ddp->forward(x)` would run the wrapped module without
// DistributedDataParallel (no gradient synchronization). Built only by the
// ctest compile_fail.ddp_arrow, which expects the static_assert's message.
#include "rankwise/parallel/ddp.h"

int main() {
  rankwise::parallel::DistributedDataParallel ddp(torch::nn::Linear(4, 2));
  auto y = ddp->forward(torch::ones({1, 4}));
  return static_cast<int>(y.numel());
}
