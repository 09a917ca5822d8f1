#pragma once
/// \file metrics.h
/// Umbrella header of rankwise/metrics/: Distributed metrics (sums and counts reduced, padding never counted).

#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/auroc.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/metrics/metric.h"
#include "rankwise/metrics/padding_mask.h"
