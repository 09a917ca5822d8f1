#pragma once
/// \file heartbeat_ages.h
/// How long ago each rank's heartbeat (CollectiveProgress::heartbeat_ms) last
/// changed, by the launcher's own steady clock: comparing a worker's clock
/// with the launcher's would call every rank of a node whose clock is off
/// "not responding". Used by the hang watchdog (hang_watchdog.h) and the
/// monitor (run_monitor.h).

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "wire/collective_progress.h"

namespace rankwise::launch::watch {

class HeartbeatAges {
 public:
  using Clock = std::chrono::steady_clock;

  /// One observation of every rank's record (index = rank; nullopt: none
  /// yet) at steady time `now`.
  void observe(const std::vector<const wire::CollectiveProgress*>& records, Clock::time_point now);

  /// Since when (at the observations' resolution) rank `rank`'s heartbeat
  /// has not changed: nullopt before its first record.
  std::optional<std::chrono::milliseconds> age(int rank, Clock::time_point now) const;

  /// Its record exists, does not say `exited`, and its heartbeat has not
  /// changed for more than detail::kStaleHeartbeatMs (the heartbeat timeout).
  bool stale(int rank, Clock::time_point now) const;

 private:
  struct Heartbeat {
    int64_t value = -1;  // heartbeat_ms last seen (-1: no record yet)
    bool exited = false;
    Clock::time_point changed;
  };
  std::vector<Heartbeat> heartbeats_;
};

}  // namespace rankwise::launch::watch
