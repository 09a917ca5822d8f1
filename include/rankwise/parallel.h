#pragma once
/// \file parallel.h
/// Umbrella header of rankwise/parallel/: Data parallelism: DistributedDataParallel and ZeroRedundancyOptimizer (like torch.nn.parallel).

#include "rankwise/parallel/ddp.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"
