#include "launch/workers/root_cause.h"

#include <tuple>

namespace rankwise::launch::workers {

namespace {

bool is_candidate(const WorkerRecord& w) {
  if (w.state == WorkerState::kFailed) return true;
  return w.state == WorkerState::kTerminated && w.error && w.error->time < w.stop_time;
}

// Smaller is a likelier root cause.
std::tuple<bool, std::chrono::steady_clock::time_point> rank_key(const WorkerRecord& w) {
  if (w.error) return {w.error->secondary, w.error->time};
  return {false, w.end};
}

}  // namespace

std::optional<std::size_t> pick_root_cause(const std::vector<WorkerRecord>& workers) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (!is_candidate(workers[i])) continue;
    if (!best || rank_key(workers[i]) < rank_key(workers[*best])) best = i;
  }
  return best;
}

}  // namespace rankwise::launch::workers
