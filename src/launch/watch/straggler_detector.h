#pragma once
/// \file straggler_detector.h
/// The straggler rule of rankwise-run --monitor: a rank is a straggler when
/// its compute time per step (step time minus the time a collective was in
/// flight, from its heartbeat) is more than `threshold` over the median of
/// the ranks' compute times, and at least kMinExcessMs over it, at every
/// observation for `window`. DDP's all_reduce evens out the step times, so
/// the rank the others wait for is the one that computes most and waits
/// least. The median is over the ranks that report a compute time (at least
/// two); ranks that are stalled or ended report none.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace rankwise::launch::watch {

/// Defaults of --straggler-threshold (a fraction: 0.2 is 20 %) and
/// --straggler-window.
constexpr double kDefaultStragglerThreshold = 0.2;
constexpr std::chrono::milliseconds kDefaultStragglerWindow{5000};
/// A rank is never a straggler by less than this (ms per step): below it,
/// scheduling noise on tiny steps would be called a straggler.
constexpr double kMinExcessMs = 2.0;

/// One rank's latest measurement.
struct RankCompute {
  int rank = 0;
  std::string host;
  std::optional<double> compute_ms;  ///< per step; nullopt: none (no steps yet, stalled, ended)
};

/// A rank became, or stopped being, a straggler.
struct StragglerEvent {
  bool started = true;  ///< false: it ended
  int rank = 0;
  std::string host;
  double compute_ms = 0;  ///< its compute time per step at the event (0 when it has none)
  double median_ms = 0;   ///< the median at the event (0 when there is none)
  std::chrono::milliseconds duration{0};  ///< how long it has been (or was) over
};

/// "rankwise-run: straggler: rank 2 (host h) computes 52 ms/step, 41 % over
/// the median 37 ms, for 6 s" (started), or "rankwise-run: straggler: rank 2
/// (host h) no longer: computes 38 ms/step, median 37 ms (it was one for
/// 23 s)" (ended), with a newline.
std::string format_straggler_event(const StragglerEvent& event);

/// The median of `values` (the mean of the middle two for an even count);
/// nullopt for none.
std::optional<double> median(std::vector<double> values);

class StragglerDetector {
 public:
  using Clock = std::chrono::steady_clock;

  StragglerDetector(double threshold, std::chrono::milliseconds window)
      : threshold_(threshold), window_(window) {}

  /// One observation of every rank at steady time `now`: the events it
  /// causes (a rank over the line for `window` starts; a flagged rank no
  /// longer over it, or without a measurement, ends).
  std::vector<StragglerEvent> observe(const std::vector<RankCompute>& ranks, Clock::time_point now);

  /// Whether rank `rank` is flagged now.
  bool flagged(int rank) const;

 private:
  struct State {
    std::optional<Clock::time_point> over_since;
    bool flagged = false;
  };
  double threshold_;
  std::chrono::milliseconds window_;
  std::vector<State> states_;  // index = rank
};

}  // namespace rankwise::launch::watch
