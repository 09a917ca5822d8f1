#include "launch/watch/heartbeat_ages.h"

#include "wire/hang_diagnosis.h"

namespace rankwise::launch::watch {

void HeartbeatAges::observe(const std::vector<const wire::CollectiveProgress*>& records,
                            Clock::time_point now) {
  heartbeats_.resize(records.size());
  for (std::size_t r = 0; r < records.size(); ++r) {
    const wire::CollectiveProgress* p = records[r];
    Heartbeat& h = heartbeats_[r];
    if (p == nullptr) continue;
    h.exited = p->exited;
    if (p->heartbeat_ms != h.value) {
      h.value = p->heartbeat_ms;
      h.changed = now;
    }
  }
}

std::optional<std::chrono::milliseconds> HeartbeatAges::age(int rank, Clock::time_point now) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= heartbeats_.size()) return std::nullopt;
  const Heartbeat& h = heartbeats_[static_cast<std::size_t>(rank)];
  if (h.value < 0) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - h.changed);
}

bool HeartbeatAges::stale(int rank, Clock::time_point now) const {
  const auto a = age(rank, now);
  return a && !heartbeats_[static_cast<std::size_t>(rank)].exited &&
         *a > std::chrono::milliseconds(wire::kStaleHeartbeatMs);
}

}  // namespace rankwise::launch::watch
