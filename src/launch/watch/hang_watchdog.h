#pragma once
/// \file hang_watchdog.h
/// rankwise-run's hang detection (--hang-timeout): from the progress every
/// rank publishes in the store (wire/collective_progress.h) and what the
/// launcher sees of its own workers, whether the job is hung, the report
/// that says why, and the stack dumps the workers write on request.
///
/// The job is hung when, for the whole timeout, every rank was blocked and no
/// rank completed a collective: a rank is blocked while it waits inside a
/// collective, is stopped (SIGSTOP, a debugger; or its heartbeat stopped
/// changing) or has ended, and at least one rank waits in a collective. It is
/// hung too when one rank of several was stopped for the whole timeout. A rank that works
/// outside collectives (one rank evaluating while the others wait in a
/// barrier) is not blocked, so a long phase of uneven work is never called a
/// hang; that is the collective timeout's job (InitOptions::timeout).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/collective_progress.h"
#include "launch/watch/heartbeat_ages.h"

namespace rankwise::launch::watch {

/// What the launcher knows about one rank of the job.
struct RankView {
  int rank = 0;
  std::optional<wire::CollectiveProgress> progress;  ///< its last record; nullopt: none yet
  bool local = false;    ///< a worker of this node: the two flags below are known
  bool stopped = false;  ///< local and in state T (is_stopped)
  bool ended = false;    ///< local and its process ended
  /// Its heartbeat has not changed for detail::kStaleHeartbeatMs of the
  /// launcher's own clock (HeartbeatAges::stale; set by HangWatchdog::observe
  /// and by the monitor).
  bool heartbeat_stale = false;
};

/// Each view's record (nullptr: none), index = rank, for HeartbeatAges.
std::vector<const wire::CollectiveProgress*> progress_of(const std::vector<RankView>& ranks);

/// What a rank was doing, as the hang report's per-rank line shows it.
enum class RankActivity { kWorking, kInCollective, kStopped, kEnded };

/// The activity of `view`: ended (its process ended or its record says
/// exited), stopped (state T, or heartbeat_stale), inside a collective
/// (entered and not yet ended), else working (no record is working: it may
/// still be loading its data).
RankActivity activity_of(const RankView& view);

/// Feeds observations, one per check, and says when the job is hung.
class HangWatchdog {
 public:
  /// `timeout`: --hang-timeout; `mismatch_window`: --deadlock-timeout
  /// (collective_mismatch.h). 0 turns either off.
  explicit HangWatchdog(std::chrono::milliseconds timeout,
                        std::chrono::milliseconds mismatch_window = std::chrono::milliseconds(0))
      : timeout_(timeout), mismatch_window_(mismatch_window) {}

  /// One observation of every rank (index = rank) at steady time `now`; sets
  /// each view's heartbeat_stale. Returns true once every rank has been
  /// blocked, with no collective completed anywhere, for the whole timeout, or
  /// one rank has been stopped for the whole timeout (whatever the others do:
  /// inside DDP's backward they wait in collectives the recorder cannot see),
  /// or every rank has waited in collectives that are not all the same one
  /// (find_mismatch), with no collective entered or completed anywhere, for
  /// the whole mismatch window (then mismatched() is true).
  bool observe(std::vector<RankView>& ranks, std::chrono::steady_clock::time_point now);

  std::chrono::milliseconds timeout() const { return timeout_; }
  std::chrono::milliseconds mismatch_window() const { return mismatch_window_; }
  /// The last observe() returned true for a mismatch, not a hang.
  bool mismatched() const { return mismatched_; }

 private:
  bool mismatch_held(const std::vector<RankView>& ranks, bool progressed,
                     std::chrono::steady_clock::time_point now);

  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds mismatch_window_;
  bool mismatched_ = false;
  std::optional<std::chrono::steady_clock::time_point> blocked_since_;
  std::optional<std::chrono::steady_clock::time_point> mismatch_since_;
  std::vector<uint64_t> entered_;  // each rank's last entered, last time
  std::vector<uint64_t> completed_;  // each rank's last completed, last time
  HeartbeatAges heartbeats_;
  std::vector<std::optional<std::chrono::steady_clock::time_point>> stopped_since_;
};

/// The ranks that held the others up: those stopped, else those ended, else
/// those inside the collective with the lowest sequence number (the ranks
/// furthest behind); every rank when all wait in the same one (a deadlock,
/// e.g. mismatched collectives).
std::vector<int> ranks_holding_up(const std::vector<RankView>& ranks);

/// Whether `culprits` (ranks_holding_up) of a job of `world_size` ranks is a
/// deadlock: several ranks, every one of them holding the others up.
inline bool is_deadlock(const std::vector<int>& culprits, int world_size) {
  return world_size > 1 && static_cast<int>(culprits.size()) == world_size;
}

/// One line per rank, each starting with "rankwise-run:   rank R (": its
/// pid, state (running, waiting in a collective, stopped, ended) and what its
/// record says (wire::describe_progress).
std::string format_rank_states(const std::vector<RankView>& ranks, int64_t now_ms);

/// The hang report, one line per rank after a headline, each starting with
/// "rankwise-run: ": state (running, stopped, ended), pid, and what its
/// record says (detail::describe_progress), then who held the others up.
std::string format_hang_report(const std::vector<RankView>& ranks, int64_t now_ms,
                               std::chrono::milliseconds timeout);

/// A stack dump as a worker wrote it (diag/stack_dump.h), each line
/// prefixed with `prefix`, C++ symbols demangled ("object(_ZN3foo3barEv+0x1c)
/// [0x...]" becomes "foo::bar() +0x1c in object").
std::string format_stack_dump(const std::string& raw, const std::string& prefix);

}  // namespace rankwise::launch::watch
