#include "checkpoint/ranks/rank_failures.h"

#include <algorithm>
#include <utility>

#include "util/text.h"
#include "core/check.h"

namespace rankwise::checkpoint::ranks {
namespace {

// `error` without its leading "rankwise: " and "rank N/W: " (in either order).
std::string without_where(const std::string& error, int rank, int world) {
  return core::unprefixed(error, {rank, world});
}

}  // namespace

std::string grouped_failures(const std::vector<std::string>& errors, const std::vector<int>& ranks, int world) {
  std::vector<std::pair<std::string, std::vector<int>>> distinct;  // in the order first seen
  for (std::size_t i = 0; i < errors.size(); ++i) {
    const std::string text = without_where(errors[i], ranks[i], world);
    auto same = std::find_if(distinct.begin(), distinct.end(), [&](const auto& d) { return d.first == text; });
    if (same == distinct.end()) {
      distinct.emplace_back(text, std::vector<int>{ranks[i]});
    } else {
      same->second.push_back(ranks[i]);
    }
  }
  if (distinct.size() == 1) return distinct[0].first;
  std::string text;
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    text += (i ? "; [" : "[") + util::rank_list(distinct[i].second) + "] " + distinct[i].first;
  }
  return text;
}

}  // namespace rankwise::checkpoint::ranks
