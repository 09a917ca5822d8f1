#pragma once
/// \file parallel.h
/// Umbrella header of rankwise/parallel/: Data parallelism: DistributedDataParallel and ZeroRedundancyOptimizer (like torch.nn.parallel), and clip_grad_norm (torch.nn.utils).

#include "rankwise/parallel/clip_grad.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/parallel/fully_sharded.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"
