#include "launch/watch/collective_mismatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "util/text.h"

namespace rankwise::launch::watch {

std::string collective_key(const wire::CollectiveProgress& progress) {
  const auto at = progress.last.rfind(" at ");
  return fmt::format("#{} {}", progress.entered,
                     at == std::string::npos ? progress.last : progress.last.substr(0, at));
}

namespace {

// The ranks (index = rank) grouped by the collective they wait in, each
// group in rank order, the groups in order of their first rank.
std::vector<std::vector<int>> groups_of(const std::vector<RankView>& ranks) {
  std::map<std::string, std::size_t> index;
  std::vector<std::vector<int>> groups;
  for (const RankView& v : ranks) {
    const auto [it, added] = index.emplace(collective_key(*v.progress), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(v.rank);
  }
  return groups;
}

// Smaller is likelier the group that entered alone: the fewest ranks, the
// fewest steps, then a collective of the program's own rather than one of
// DistributedDataParallel's (where training goes on), then the first in.
std::tuple<std::size_t, int64_t, bool, int64_t, int> alone_key(const std::vector<RankView>& ranks,
                                                               const std::vector<int>& group) {
  int64_t step = INT64_MAX, entered_ms = INT64_MAX;
  bool ddp = true;
  for (int r : group) {
    const wire::CollectiveProgress& p = *ranks[static_cast<std::size_t>(r)].progress;
    step = std::min(step, p.step);
    entered_ms = std::min(entered_ms, p.entered_ms);
    ddp = ddp && wire::in_ddp_collective(p);
  }
  return {group.size(), step, ddp, entered_ms, group.front()};
}

}  // namespace

std::optional<CollectiveMismatch> find_mismatch(const std::vector<RankView>& ranks) {
  if (ranks.size() < 2) return std::nullopt;
  uint64_t most_completed = 0;
  for (const RankView& v : ranks) {
    if (activity_of(v) != RankActivity::kInCollective) return std::nullopt;
    most_completed = std::max(most_completed, v.progress->completed);
  }
  // A rank still inside a collective that another rank completed is only
  // finishing it (a broadcast's root is done before its receivers).
  for (const RankView& v : ranks) {
    if (v.progress->entered <= most_completed) return std::nullopt;
  }
  const std::vector<std::vector<int>> groups = groups_of(ranks);
  if (groups.size() < 2) return std::nullopt;
  const auto alone = std::min_element(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    return alone_key(ranks, a) < alone_key(ranks, b);
  });
  CollectiveMismatch m;
  m.alone = *alone;
  for (const RankView& v : ranks) {
    if (std::find(m.alone.begin(), m.alone.end(), v.rank) == m.alone.end()) m.others.push_back(v.rank);
  }
  return m;
}

namespace {

// "rank 1 waited in X; ranks 2, 3 waited in Y": `which` grouped by the
// collective (with the first one's call site) they wait in.
std::string waits_of(const std::vector<RankView>& ranks, const std::vector<int>& which) {
  std::vector<RankView> subset;
  for (int r : which) subset.push_back(ranks[static_cast<std::size_t>(r)]);
  std::vector<std::string> parts;
  for (const std::vector<int>& members : groups_of(subset)) {
    parts.push_back(fmt::format("{} waited in {}", util::rank_list(members),
                                ranks[static_cast<std::size_t>(members.front())].progress->last));
  }
  return util::join_strings(parts, "; ");
}

}  // namespace

std::string describe_mismatch(const std::vector<RankView>& ranks, const CollectiveMismatch& m) {
  const wire::CollectiveProgress& first = *ranks[static_cast<std::size_t>(m.alone.front())].progress;
  return fmt::format("{} entered {}{}, while {}", util::rank_list(m.alone), first.last,
                     m.alone.size() == 1 ? " alone" : "", waits_of(ranks, m.others));
}

std::string format_mismatch_report(const std::vector<RankView>& ranks, const CollectiveMismatch& m,
                                   int64_t now_ms, std::chrono::milliseconds window) {
  std::string out = fmt::format(
      "rankwise-run: deadlock: every rank waits in a collective, not all in the same one, and "
      "none completed a collective for {:g} s (--deadlock-timeout):\n",
      window.count() / 1000.0);
  out += format_rank_states(ranks, now_ms);
  out += fmt::format(
      "rankwise-run: {}; the others never entered it. Every rank must call every collective in the "
      "same order: look for a collective inside a branch only some ranks take (e.g. `if (rank == "
      "0)`)\n",
      describe_mismatch(ranks, m));
  return out;
}

}  // namespace rankwise::launch::watch
