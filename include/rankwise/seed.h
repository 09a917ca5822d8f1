#pragma once
/// \file seed.h
/// Seeding every random number generator a libtorch training program uses.

#include <cstdint>

namespace rankwise {

/// Seeds libtorch's default CPU generator and, where CUDA is available, the
/// generator of every visible GPU (torch::manual_seed), as Lightning's
/// seed_everything does for torch. Call it on every rank with the same seed
/// before the model is built, so that every rank starts from the same
/// initialisation (DistributedDataParallel also broadcasts rank 0's
/// parameters). Local: no communication. DistributedSampler's shuffling has
/// its own seed (DistributedSamplerOptions::seed) and is not affected.
void seed_everything(uint64_t seed);

}  // namespace rankwise
