#include "launch/workers/root_cause.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "util/text.h"

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
  // An error every rank raised for a decision of rank R is R's, whichever
  // rank wrote it first.
  const auto echoed = best && workers[*best].error ? wire::echoed_rank(workers[*best].error->message)
                                                    : std::nullopt;
  for (std::size_t i = 0; echoed && i < workers.size(); ++i) {
    if (workers[i].rank == *echoed && is_candidate(workers[i]) && workers[i].error) return i;
  }
  return best;
}

namespace {

// When a record written at `unix_ms` was written, on the launcher's steady clock.
std::chrono::steady_clock::time_point steady_from_unix_ms(int64_t unix_ms) {
  return std::chrono::steady_clock::now() - std::chrono::milliseconds(wire::unix_ms_now() - unix_ms);
}

// When worker `w` left on its own before `failure` (the peers' error), or
// nullopt: its record says it destroyed its process group before the
// launcher asked it to stop, or it exited with code 0 unasked (or asked only
// after that failure).
std::optional<std::chrono::steady_clock::time_point> left_on_its_own(
    const WorkerRecord& w, const std::optional<wire::CollectiveProgress>& record,
    std::chrono::steady_clock::time_point failure) {
  if (w.error) return std::nullopt;
  if (record && record->exited) {
    const auto left = steady_from_unix_ms(record->heartbeat_ms);
    if (!w.stop_requested || left < w.stop_time) return left;
  }
  if (w.state == WorkerState::kSucceeded && (!w.stop_requested || w.stop_time > failure)) {
    return w.end;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::size_t> pick_early_exit(
    const std::vector<WorkerRecord>& workers, std::optional<std::size_t> root,
    const std::vector<std::optional<wire::CollectiveProgress>>& records) {
  if (!root) return std::nullopt;
  const WorkerRecord& failed = workers[*root];
  if (!failed.error || !failed.error->secondary) return std::nullopt;
  std::optional<std::size_t> early;
  std::chrono::steady_clock::time_point earliest;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto r = static_cast<std::size_t>(workers[i].rank);
    const auto left = left_on_its_own(workers[i], r < records.size() ? records[r] : std::nullopt,
                                      failed.error->time);
    if (left && (!early || *left < earliest)) {
      early = i;
      earliest = *left;
    }
  }
  return early;
}

namespace {

// "in all_reduce #25 (...) at train.cpp:95" (in it, or failed in it), or
// "past all_reduce #25 ..." (it had completed it).
std::string where_was(const wire::CollectiveProgress& p) {
  if (p.entered == 0) return "in no collective yet";
  const bool inside = p.failed || p.ended_ms == 0 || p.completed < p.entered;
  return fmt::format("{} {}", inside ? "in" : "past", p.last);
}

}  // namespace

std::string describe_early_exit(int rank,
                                const std::vector<std::optional<wire::CollectiveProgress>>& records) {
  std::string text = "ended with exit code 0 (returned from main or called exit)";
  const std::size_t own = static_cast<std::size_t>(rank);
  if (own < records.size() && records[own] && records[own]->step >= 0) text += fmt::format(" at step {}", records[own]->step);
  // The other ranks grouped by where they were, in order of their first rank.
  std::map<std::string, std::vector<int>> by_place;
  std::vector<std::string> order;
  for (int r = 0; r < static_cast<int>(records.size()); ++r) {
    const auto& p = records[static_cast<std::size_t>(r)];
    if (r == rank || !p) continue;
    const std::string place = where_was(*p);
    if (by_place.find(place) == by_place.end()) order.push_back(place);
    by_place[place].push_back(r);
  }
  std::vector<std::string> parts;
  for (const std::string& place : order) {
    parts.push_back(fmt::format("{} {} {}", util::rank_list(by_place[place]),
                                by_place[place].size() == 1 ? "was" : "were", place));
  }
  text += parts.empty() ? ", while the other ranks were still running"
                        : fmt::format(", while {}", util::join_strings(parts, "; "));
  return text + ": it left while they still needed it";
}

}  // namespace rankwise::launch::workers
