#pragma once
// The launcher's numeric command-line values, parsed in one place as
// torchrun parses them: an integer, and comma-separated lists of indices
// (--only-ranks 0,3 and --local-ranks-filter 0,1).
#include <optional>
#include <string>
#include <vector>

namespace rankwise::launch::cli {

/// A decimal integer as torchrun reads its flags (Python's int()): digits,
/// at most 9, with an optional sign and surrounding spaces (" +7 " is 7,
/// "-0" is 0, "-1" is -1); nullopt for anything else ("", "1.5", "0x1",
/// "1 2").
std::optional<long> decimal(const std::string& text);

/// Parses `text`, the value of `flag`, as a comma-separated list of indices
/// in [0, bound): "0,3". `what` names an index in errors ("rank", "local
/// rank") and `bound_note` says where the bound comes from ("--nproc-per-node
/// 2"; may be empty). Duplicates are kept once, in first-seen order (as
/// torchrun's set). Throws UsageError naming the flag, the whole value and
/// the entry at fault for an empty list or entry ("0,", "0,,1"), an entry
/// that is not an integer (decimal()), or an index outside [0, bound).
std::vector<int> parse_index_list(const std::string& text, const std::string& flag,
                                  const std::string& what, int bound,
                                  const std::string& bound_note);

}  // namespace rankwise::launch::cli
