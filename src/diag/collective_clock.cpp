#include "diag/collective_clock.h"

#include <algorithm>

namespace rankwise::diag {

namespace {

int64_t steady_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void CollectiveClock::begin(uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_flight_.empty()) {
    version_.fetch_add(1, std::memory_order_acq_rel);
    open_since_ns_.store(std::max<int64_t>(steady_ns_now(), 1), std::memory_order_relaxed);
    version_.fetch_add(1, std::memory_order_acq_rel);
  }
  in_flight_.push_back(sequence);
}

void CollectiveClock::end(uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto open = std::find(in_flight_.begin(), in_flight_.end(), sequence);
  if (open == in_flight_.end()) return;
  in_flight_.erase(open);
  if (!in_flight_.empty()) return;
  const int64_t since = open_since_ns_.load(std::memory_order_relaxed);
  version_.fetch_add(1, std::memory_order_acq_rel);
  closed_ns_.fetch_add(steady_ns_now() - since, std::memory_order_relaxed);
  open_since_ns_.store(0, std::memory_order_relaxed);
  version_.fetch_add(1, std::memory_order_acq_rel);
}

std::chrono::nanoseconds CollectiveClock::total() const {
  for (;;) {
    const uint64_t before = version_.load(std::memory_order_acquire);
    if (before % 2 == 1) continue;  // an update is in progress (a few instructions)
    const int64_t closed = closed_ns_.load(std::memory_order_relaxed);
    const int64_t since = open_since_ns_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (version_.load(std::memory_order_relaxed) != before) continue;
    return std::chrono::nanoseconds(closed + (since > 0 ? steady_ns_now() - since : 0));
  }
}

CollectiveClock& collective_clock() {
  static CollectiveClock clock;
  return clock;
}

}  // namespace rankwise::diag
