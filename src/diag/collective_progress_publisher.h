#pragma once
// Publishes this rank's progress (wire/collective_progress.h) to the job's
// store from a background thread, so that a collective costs no store round
// trip: the collective, or a step counted by monitor::record_step, only
// wakes the thread, which writes at most every 20 ms (batching a burst of
// them into one write) and at least every second (the heartbeat). It has its
// own store connection, never shared with the main thread. Not copyable; the
// destructor publishes `exited` with the last step: the final heartbeat.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace rankwise::diag {
class FlightRecorder;

class CollectiveProgressPublisher {
 public:
  /// Connects to the store at addr:port (keys under `prefix`) as rank `rank`
  /// and starts the thread. Each record also carries the heartbeat of
  /// monitor::record_step (monitor/step_stats.h), and `device` unless
  /// monitor::set_device() names another.
  /// Throws what c10d's TCPStore throws when the store cannot be reached
  /// within `connect_timeout`.
  CollectiveProgressPublisher(const std::string& addr, int port, const std::string& prefix, int rank,
                    std::shared_ptr<const FlightRecorder> recorder,
                    std::chrono::milliseconds connect_timeout, std::string device);
  /// Publishes `exited` and stops the thread, waiting for it at most 2 s (a
  /// thread stuck on an unresponsive store is left to end with the process).
  ~CollectiveProgressPublisher();
  CollectiveProgressPublisher(const CollectiveProgressPublisher&) = delete;
  CollectiveProgressPublisher& operator=(const CollectiveProgressPublisher&) = delete;

  /// Something changed: publish soon (never blocks on the store).
  void notify();
  /// Publishes now and waits until it is written, at most `timeout`.
  void flush(std::chrono::milliseconds timeout);

  struct State;  // shared with the thread

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
  uint64_t step_listener_ = 0;  // diag::set_step_listener's id
};

}  // namespace rankwise::diag
