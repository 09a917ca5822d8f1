#pragma once
// Which ranks held a collective up: from every rank's published progress
// (wire/collective_progress.h), the sentence a TimeoutError or PeerError adds
// ("ranks 1, 2 never entered it: ...").
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/collective_progress.h"

namespace rankwise::wire {

/// Given that `my_rank` waited in collective `sequence` of its group and the
/// progress each rank published (index = rank; nullopt: none found), says
/// which other ranks had not entered it, grouped by what they did instead
/// (never entered it and where they were last, exited, published nothing),
/// and which had entered it. `now_ms` is Unix milliseconds. "" when every
/// other rank had entered it.
std::string describe_missing_ranks(int my_rank, uint64_t sequence,
                                   const std::vector<std::optional<CollectiveProgress>>& progress,
                                   int64_t now_ms);

/// What a rank was doing according to its record: "in no collective yet",
/// "last in all_reduce #5 (...) (completed 1.2 s ago)", "exited (process
/// group destroyed); ...", with "; heartbeat stopped N s ago (...)" when its
/// heartbeat is older than kStaleHeartbeatMs; for no record, "no progress
/// published (...)". `now_ms` is Unix milliseconds.
std::string describe_progress(const std::optional<CollectiveProgress>& progress, int64_t now_ms);

/// A heartbeat older than this (it beats every second) means the process is
/// stopped, swapped out or stuck so hard that its publisher thread cannot run.
constexpr int64_t kStaleHeartbeatMs = 2500;

/// Whether `progress` (written at heartbeat_ms) is older than kStaleHeartbeatMs.
inline bool heartbeat_stale(const CollectiveProgress& progress, int64_t now_ms) {
  return now_ms - progress.heartbeat_ms > kStaleHeartbeatMs;
}

/// The ranks among `progress` (other than `my_rank`) that had not entered
/// collective `sequence`.
std::vector<int> ranks_not_entered(int my_rank, uint64_t sequence,
                                   const std::vector<std::optional<CollectiveProgress>>& progress);

}  // namespace rankwise::wire
