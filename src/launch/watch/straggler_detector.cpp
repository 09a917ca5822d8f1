#include "launch/watch/straggler_detector.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace rankwise::launch::watch {

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string format_straggler_event(const StragglerEvent& e) {
  const std::string who =
      fmt::format("rank {}{}", e.rank, e.host.empty() ? "" : fmt::format(" (host {})", e.host));
  const double seconds = std::round(e.duration.count() / 1000.0);
  if (e.started) {
    const double over = e.median_ms > 0 ? (e.compute_ms / e.median_ms - 1) * 100 : 0;
    return fmt::format(
        "rankwise-run: straggler: {} computes {:.0f} ms/step, {:.0f} % over the median {:.0f} ms, "
        "for {:g} s\n",
        who, e.compute_ms, over, e.median_ms, seconds);
  }
  const std::string now =
      e.compute_ms > 0 ? fmt::format("computes {:.0f} ms/step, median {:.0f} ms", e.compute_ms,
                                     e.median_ms)
                       : std::string("it reports no step time (stalled or ended)");
  return fmt::format("rankwise-run: straggler: {} no longer: {} (it was one for {:g} s)\n", who,
                     now, seconds);
}

std::vector<StragglerEvent> StragglerDetector::observe(const std::vector<RankCompute>& ranks,
                                                       Clock::time_point now) {
  std::vector<double> values;
  for (const RankCompute& r : ranks) {
    if (r.compute_ms) values.push_back(*r.compute_ms);
  }
  const std::optional<double> mid = values.size() >= 2 ? median(values) : std::nullopt;
  std::vector<StragglerEvent> events;
  for (const RankCompute& r : ranks) {
    if (r.rank < 0) continue;
    if (static_cast<std::size_t>(r.rank) >= states_.size()) states_.resize(r.rank + 1);
    State& s = states_[static_cast<std::size_t>(r.rank)];
    const bool over = mid && r.compute_ms && *r.compute_ms > *mid * (1 + threshold_) &&
                      *r.compute_ms - *mid >= kMinExcessMs;
    StragglerEvent e;
    e.rank = r.rank;
    e.host = r.host;
    e.compute_ms = r.compute_ms.value_or(0);
    e.median_ms = mid.value_or(0);
    if (over) {
      if (!s.over_since) s.over_since = now;
      e.duration = std::chrono::duration_cast<std::chrono::milliseconds>(now - *s.over_since);
      if (!s.flagged && e.duration >= window_) {
        s.flagged = true;
        e.started = true;
        events.push_back(e);
      }
    } else {
      if (s.flagged) {
        e.started = false;
        e.duration = std::chrono::duration_cast<std::chrono::milliseconds>(now - *s.over_since);
        events.push_back(e);
      }
      s.flagged = false;
      s.over_since.reset();
    }
  }
  return events;
}

bool StragglerDetector::flagged(int rank) const {
  return rank >= 0 && static_cast<std::size_t>(rank) < states_.size() &&
         states_[static_cast<std::size_t>(rank)].flagged;
}

}  // namespace rankwise::launch::watch
