#pragma once
// The process-wide counters behind monitor::record_step (step_stats.h), read
// by the collective progress publisher's thread, and the
// rates it derives from two readings.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace rankwise::diag {

/// Counts one step of `samples` samples (monitor::record_step). Local, never
/// blocks: a few atomic operations and one read of the steady clock.
void count_step(int64_t samples, std::optional<double> loss);

/// Sets the device the step statistics name (monitor::set_device).
void set_step_device(const std::string& device);

/// Calls `listener` after every count_step(), on the counting thread, so
/// that the progress publisher can publish a step at once (one listener: a
/// later call replaces it). `listener` must not block. Returns its id for
/// remove_step_listener. Any thread.
uint64_t set_step_listener(std::function<void()> listener);

/// Removes listener `id` unless another replaced it. Any thread.
void remove_step_listener(uint64_t id);

/// One reading of the counters, as of the last record_step().
struct StepSample {
  int64_t steps = 0;    ///< record_step() calls so far
  int64_t samples = 0;  ///< their samples, summed
  int64_t end_ns = 0;   ///< steady clock at the last call (ns)
  int64_t wait_ns = 0;  ///< detail::collective_clock().total() at the last call (ns)
  std::optional<double> loss;  ///< the last loss given
};

/// Per-step averages between two readings.
struct StepRates {
  double step_ms = 0;        ///< wall time per step
  double wait_ms = 0;        ///< of which a collective was in flight
  double samples_per_s = 0;  ///< samples over the wall time
};

/// The counters now (any thread; never blocks).
StepSample step_sample();

/// The rates from `earlier` to `later`; nullopt when no step ended in between.
std::optional<StepRates> rates_between(const StepSample& earlier, const StepSample& later);

/// What monitor::set_device() set; "" when it was never called.
std::string step_device();

}  // namespace rankwise::diag
