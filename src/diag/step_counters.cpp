#include "diag/step_counters.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <mutex>

#include "diag/collective_clock.h"

namespace rankwise::diag {

namespace {

// Written by record_step (one thread: the training loop), read by the
// publisher's thread. `version` is odd while a step is being recorded, so a
// reader never mixes two steps' fields.
struct Counters {
  std::atomic<uint64_t> version{0};
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> samples{0};
  std::atomic<int64_t> end_ns{0};
  std::atomic<int64_t> wait_ns{0};
  std::atomic<uint64_t> loss_bits{0};
  std::atomic<bool> has_loss{false};
};

Counters& counters() {
  static Counters c;
  return c;
}

std::mutex device_mutex;  // set_device is rare; the publisher reads it once a second
std::string device_name;

std::mutex listener_mutex;  // uncontended but at set_step_listener
std::function<void()> step_listener;
uint64_t listener_id = 0;  // of step_listener; ids count from 1

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void count_step(int64_t samples, std::optional<double> loss) {
  Counters& c = counters();
  const int64_t wait = collective_clock().total().count();
  const int64_t now = steady_ns();
  c.version.fetch_add(1, std::memory_order_acq_rel);
  c.steps.fetch_add(1, std::memory_order_relaxed);
  c.samples.fetch_add(samples, std::memory_order_relaxed);
  c.end_ns.store(now, std::memory_order_relaxed);
  c.wait_ns.store(wait, std::memory_order_relaxed);
  if (loss) {
    c.loss_bits.store(std::bit_cast<uint64_t>(*loss), std::memory_order_relaxed);
    c.has_loss.store(true, std::memory_order_relaxed);
  }
  c.version.fetch_add(1, std::memory_order_acq_rel);
  std::lock_guard<std::mutex> lock(listener_mutex);
  if (step_listener) step_listener();
}

uint64_t set_step_listener(std::function<void()> listener) {
  static uint64_t ids = 0;
  std::lock_guard<std::mutex> lock(listener_mutex);
  step_listener = std::move(listener);
  listener_id = ++ids;
  return listener_id;
}

void remove_step_listener(uint64_t id) {
  std::lock_guard<std::mutex> lock(listener_mutex);
  if (id != listener_id) return;
  step_listener = nullptr;
  listener_id = 0;
}

void set_step_device(const std::string& device) {
  std::lock_guard<std::mutex> lock(device_mutex);
  device_name = device;
}

StepSample step_sample() {
  const Counters& c = counters();
  for (;;) {
    const uint64_t before = c.version.load(std::memory_order_acquire);
    if (before % 2 == 1) continue;
    StepSample s;
    s.steps = c.steps.load(std::memory_order_relaxed);
    s.samples = c.samples.load(std::memory_order_relaxed);
    s.end_ns = c.end_ns.load(std::memory_order_relaxed);
    s.wait_ns = c.wait_ns.load(std::memory_order_relaxed);
    if (c.has_loss.load(std::memory_order_relaxed)) {
      s.loss = std::bit_cast<double>(c.loss_bits.load(std::memory_order_relaxed));
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c.version.load(std::memory_order_relaxed) == before) return s;
  }
}

std::optional<StepRates> rates_between(const StepSample& earlier, const StepSample& later) {
  const int64_t steps = later.steps - earlier.steps;
  const int64_t wall_ns = later.end_ns - earlier.end_ns;
  if (steps <= 0 || wall_ns <= 0) return std::nullopt;
  StepRates r;
  r.step_ms = static_cast<double>(wall_ns) / 1e6 / static_cast<double>(steps);
  const int64_t wait_ns = std::clamp<int64_t>(later.wait_ns - earlier.wait_ns, 0, wall_ns);
  r.wait_ms = static_cast<double>(wait_ns) / 1e6 / static_cast<double>(steps);
  r.samples_per_s = static_cast<double>(later.samples - earlier.samples) * 1e9 /
                    static_cast<double>(wall_ns);
  return r;
}

std::string step_device() {
  std::lock_guard<std::mutex> lock(device_mutex);
  return device_name;
}

}  // namespace rankwise::diag
