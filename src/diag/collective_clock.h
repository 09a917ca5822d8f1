#pragma once
// Time during which at least one collective was in flight (entered and not
// yet ended), summed: the union of the collectives' intervals, so
// collectives that overlap (DistributedDataParallel's asynchronous bucket
// all_reduces) count once. It is the "wait" part of a training step in the
// heartbeats (rankwise/monitor/step_stats.h). A blocking collective's
// interval is its caller's wait; an asynchronous one's also covers the
// computation it overlaps (e.g. the rest of the backward pass).
//
// ProcessGroup::recorded() and record_launched() call begin()/end() for
// every collective they record; monitor::record_step() reads total() at
// every training step, without a lock.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace rankwise::diag {

class CollectiveClock {
 public:
  /// Collective `sequence` started (any thread).
  void begin(uint64_t sequence);
  /// It ended; a second end of the same collective (a failed one is ended by
  /// its explanation and by its caller) and an unknown one are ignored.
  void end(uint64_t sequence);
  /// The time with a collective in flight so far, by the steady clock,
  /// including the one open now. Never blocks: no lock.
  std::chrono::nanoseconds total() const;

 private:
  std::mutex mutex_;                 // begin/end
  std::vector<uint64_t> in_flight_;  // sequences begun and not ended
  // Written under mutex_, read without it; version_ is odd while they change.
  std::atomic<uint64_t> version_{0};
  std::atomic<int64_t> closed_ns_{0};  // the closed busy intervals, summed
  std::atomic<int64_t> open_since_ns_{0};  // start of the open one (0: none)
};

/// The process's clock, for the collectives of the process group.
CollectiveClock& collective_clock();

}  // namespace rankwise::diag
