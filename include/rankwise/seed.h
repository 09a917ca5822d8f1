#pragma once
/// \file seed.h
/// Seeding every random number generator a libtorch training program uses.

#include <cstdint>

namespace rankwise {

/// Seeds libtorch's CPU generator and, with CUDA, every visible GPU's (torch::manual_seed), as
/// Lightning's seed_everything. Call it on every rank with the same seed before building the
/// model. Local: no communication. DistributedSampler's shuffling has its own seed
/// (DistributedSamplerOptions::seed).
void seed_everything(uint64_t seed);

}  // namespace rankwise
