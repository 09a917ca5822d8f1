#pragma once
/// \file rank_stats.h
/// One rank's share of the training steps between two reductions of a
/// Progress: what the `ranks` field of a MetricsLog record holds and
/// rankwise-report draws per rank.
namespace rankwise::monitor {

/// One rank's throughput and step time split, over the steps between two
/// reductions (Progress::rank_stats()).
struct RankStats {
  int rank = 0;               ///< global rank
  double samples_per_s = 0;   ///< this rank's own throughput (samples/s, by its own clock)
  double wait_ms = 0;         ///< time per step with a collective in flight (ms)
  double compute_ms = 0;      ///< the rest of the step's time (ms)
};

}  // namespace rankwise::monitor
