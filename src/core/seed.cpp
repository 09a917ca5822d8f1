#include "rankwise/seed.h"

#include <torch/utils.h>

namespace rankwise {

void seed_everything(uint64_t seed) { torch::manual_seed(seed); }

}  // namespace rankwise
