#pragma once
/// \file rankwise.h
/// Umbrella include: everything a data-parallel training program needs.

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/consensus.h"
#include "rankwise/data/distributed_sampler.h"
#include "rankwise/data/fashion_mnist.h"
#include "rankwise/data/idx.h"
#include "rankwise/ddp.h"
#include "rankwise/device.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/auroc.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/metrics/metric.h"
#include "rankwise/process_group.h"
#include "rankwise/run_main.h"
