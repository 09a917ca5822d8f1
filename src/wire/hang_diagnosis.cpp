#include "wire/hang_diagnosis.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "util/text.h"

namespace rankwise::wire {

namespace {

std::string ago(int64_t then_ms, int64_t now_ms) {
  return fmt::format("{:.1f} s ago", static_cast<double>(now_ms - then_ms) / 1000.0);
}

// What rank `p` was doing instead of collective `sequence`; with `timed`
// false the same without times, to group ranks that did the same thing.
std::string whereabouts(const std::optional<CollectiveProgress>& p, int64_t now_ms, bool timed) {
  const auto ago = [&](int64_t then_ms, int64_t now) {
    return timed ? wire::ago(then_ms, now) : "";
  };
  if (!p) return "no progress published (not started, or no process group created)";
  std::string last;
  if (p->entered == 0) {
    last = "in no collective yet";
  } else {
    const std::string when = p->ended_ms > 0 ? p->failed ? "failed " + ago(p->ended_ms, now_ms)
                                                         : "completed " + ago(p->ended_ms, now_ms)
                                             : "entered " + ago(p->entered_ms, now_ms);
    last = "last in " + p->last + " (" + when + ")";
  }
  if (p->exited) return "exited (process group destroyed); " + last;
  std::string text = last;
  if (heartbeat_stale(*p, now_ms)) {
    text += "; heartbeat stopped " + ago(p->heartbeat_ms, now_ms) +
            " (process stopped, e.g. SIGSTOP, or unresponsive)";
  }
  return text;
}

}  // namespace

std::string describe_progress(const std::optional<CollectiveProgress>& progress, int64_t now_ms) {
  return whereabouts(progress, now_ms, true);
}

std::vector<int> ranks_not_entered(int my_rank, uint64_t sequence,
                                   const std::vector<std::optional<CollectiveProgress>>& progress) {
  std::vector<int> missing;
  for (int r = 0; r < static_cast<int>(progress.size()); ++r) {
    if (r == my_rank) continue;
    const auto& p = progress[static_cast<std::size_t>(r)];
    if (!p || p->entered < sequence) missing.push_back(r);
  }
  return missing;
}

std::string describe_missing_ranks(int my_rank, uint64_t sequence,
                                   const std::vector<std::optional<CollectiveProgress>>& progress,
                                   int64_t now_ms) {
  const std::vector<int> missing = ranks_not_entered(my_rank, sequence, progress);
  if (missing.empty()) return "";
  // Ranks grouped by what they were doing, in order of their first rank.
  std::map<std::string, std::vector<int>> by_text;
  std::vector<std::string> order;
  for (int r : missing) {
    const auto& p = progress[static_cast<std::size_t>(r)];
    const std::string key = whereabouts(p, now_ms, false);
    if (by_text.find(key) == by_text.end()) order.push_back(key);
    by_text[key].push_back(r);
  }
  std::vector<std::string> parts;  // each group with its first rank's times
  for (const auto& key : order) {
    const auto& ranks = by_text[key];
    parts.push_back(util::rank_list(ranks) + ": " +
                    whereabouts(progress[static_cast<std::size_t>(ranks.front())], now_ms, true));
  }
  std::vector<int> entered;
  for (int r = 0; r < static_cast<int>(progress.size()); ++r) {
    if (r != my_rank && std::find(missing.begin(), missing.end(), r) == missing.end()) {
      entered.push_back(r);
    }
  }
  std::string text = fmt::format("{} never entered it (#{}): {}", util::rank_list(missing),
                                 sequence, util::join_strings(parts, "; "));
  if (!entered.empty()) text += "; " + util::rank_list(entered) + " had entered it";
  return text;
}

}  // namespace rankwise::wire
