#pragma once
/// \file data.h
/// Umbrella header of rankwise/data/: Data: DistributedSampler, DataLoaderSampler, IDX files and Fashion-MNIST.

#include "rankwise/data/data_loader_sampler.h"
#include "rankwise/data/distributed_sampler.h"
#include "rankwise/data/fashion_mnist.h"
#include "rankwise/data/idx.h"
