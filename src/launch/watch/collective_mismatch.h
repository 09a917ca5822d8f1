#pragma once
/// \file collective_mismatch.h
/// rankwise-run's default deadlock check (--deadlock-timeout): every rank
/// waits inside a collective and they are not all in the same one (another
/// sequence number, or another operation, name, dtype or shape: the record's
/// text without its call site). Such collectives can never complete, e.g.
/// a barrier inside `if (rank == 0)` while the others are in DDP's gradient
/// all_reduce. HangWatchdog reports it once no collective has completed for
/// the window; this file finds the ranks and writes the report.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch/watch/hang_watchdog.h"

namespace rankwise::launch::watch {

/// Ranks waiting in different collectives: `alone`, the ranks of the
/// smallest group that waits in one collective (ties: the group whose ranks
/// recorded the fewest steps, then the one entered first: the ranks that
/// stopped where the others went on), and `others`, every other rank.
struct CollectiveMismatch {
  std::vector<int> alone;
  std::vector<int> others;
};

/// The record's collective without its call site ("barrier #12"), which
/// ranks in the same collective share.
std::string collective_key(const wire::CollectiveProgress& progress);

/// nullopt unless every rank (index = rank) waits inside a collective
/// (activity_of: kInCollective), none that another rank has completed (that
/// rank is only finishing it), and they are not all in the same one.
std::optional<CollectiveMismatch> find_mismatch(const std::vector<RankView>& ranks);

/// The deadlock report: a headline, one line per rank as in
/// format_hang_report, then which ranks entered a collective alone, where,
/// and what the others wait in instead. Lines start with "rankwise-run: ".
std::string format_mismatch_report(const std::vector<RankView>& ranks,
                                   const CollectiveMismatch& mismatch, int64_t now_ms,
                                   std::chrono::milliseconds window);

/// One line for the failure summary: "rank 0 entered barrier #12 at
/// train.cpp:95 alone, while rank 1 waited in ...".
std::string describe_mismatch(const std::vector<RankView>& ranks,
                              const CollectiveMismatch& mismatch);

}  // namespace rankwise::launch::watch
