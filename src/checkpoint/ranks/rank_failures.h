#pragma once
// Failures gathered from several ranks, as one message: the same failure on
// many ranks is told once, with the ranks that had it.
#include <string>
#include <vector>

namespace rankwise::checkpoint::ranks {

/// `errors[i]` is rank `ranks[i]`'s message (of `world` ranks). Each is
/// stripped of its "rankwise: " and "rank N/W: " prefixes; when they are all
/// the same the result is that text, else each distinct text once, preceded
/// by the ranks that had it: "[ranks 0, 1] ...; [rank 3] ...".
std::string grouped_failures(const std::vector<std::string>& errors, const std::vector<int>& ranks, int world);

}  // namespace rankwise::checkpoint::ranks
