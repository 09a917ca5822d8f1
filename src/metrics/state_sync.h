#pragma once
// The cross-rank synchronisation of metric states, shared by Metric::compute()
// and MetricCollection::compute() (src/metrics/state_sync.cpp).

#include <vector>

#include "rankwise/metrics/metric.h"

namespace rankwise::metrics {

/// Combines the states of `metrics` across ranks (one all_reduce for every
/// kSum/kMin/kMax state of all of them, two all_gathers for every kCat state)
/// and returns, per metric, its combined StateMap. Without a process group,
/// or with one rank, returns the local states and communicates nothing.
/// Collective. Adds what it issued to `stats`.
std::vector<Metric::StateMap> sync_states(const std::vector<const Metric*>& metrics,
                                          SyncStats& stats);

}  // namespace rankwise::metrics
