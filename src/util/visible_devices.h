#pragma once
// CUDA_VISIBLE_DEVICES read strictly, in one place for the library's device
// choice (rankwise::parse_cuda_visible_devices) and the launcher's
// --virtual-local-rank, which hands each worker one entry.
#include <optional>
#include <string>
#include <vector>

namespace rankwise::util {

/// The entries of a CUDA_VISIBLE_DEVICES value, each trimmed of spaces and
/// tabs: nullopt when unset, none when "" or "-1" (every GPU hidden).
/// Entries are device indices, GPU-<uuid> or MIG names. Throws
/// std::invalid_argument saying which entry is wrong and why (empty, not an
/// index or UUID, or repeating an earlier one: "01" repeats "1"), where
/// CUDA would silently drop everything from the bad entry on.
std::optional<std::vector<std::string>> parse_visible_devices(const std::optional<std::string>& value);

}  // namespace rankwise::util
