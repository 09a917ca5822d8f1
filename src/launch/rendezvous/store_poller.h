#pragma once
/// \file store_poller.h
/// A thread of the launcher's with a store client of its own, which calls the
/// job's store (c10d::TCPStore) every `interval` and runs the writes posted to
/// it, so that the launcher's main loop (output, signals, the grace period)
/// never waits inside a store call: with libtorch 1.13 a client that sends half
/// a message stalls every store call until it closes.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace c10d {
class TCPStore;
}

namespace rankwise::launch::rendezvous {

/// The value under `key` as text, or nullopt when the key is not set (one
/// check, then one get). Throws what the store throws.
std::optional<std::string> read_if_set(c10d::TCPStore& store, const std::string& key);

class StorePoller {
 public:
  /// Called on the poller's thread; throws (any std::exception) when the
  /// store fails, after which the client is reconnected and the call retried.
  using Task = std::function<void(c10d::TCPStore&)>;

  /// Connects to the store at addr:port (2 s per call) and calls `poll` at
  /// once, then every `interval`.
  StorePoller(const std::string& addr, int port, std::chrono::milliseconds interval, Task poll);
  /// Stops the thread, waiting for it at most 1 s (one stuck on the store is
  /// left to end with the process; it owns what it uses).
  ~StorePoller();
  StorePoller(const StorePoller&) = delete;
  StorePoller& operator=(const StorePoller&) = delete;

  /// Queues `write` to run once on the thread, before the next poll; a write
  /// that throws is retried (in order) until it succeeds or the poller ends.
  void post(Task write);

  /// Waits at most `timeout` until every posted write ran; true when they did.
  bool flush(std::chrono::milliseconds timeout);

  struct State;  // shared with the thread

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace rankwise::launch::rendezvous
