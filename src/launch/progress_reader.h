#pragma once
/// \file progress_reader.h
/// Reads every rank's progress record (detail/progress_record.h) from the
/// job's store on a thread of its own, with a store client of its own, so
/// that the launcher's main loop (output, signals, the grace period) never
/// waits on the store: with libtorch 1.13 a client that sends half a message
/// stalls every store call until it closes.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "detail/progress_record.h"

namespace rankwise {
namespace launch {

class ProgressReader {
 public:
  /// One complete read of every rank's record (index = rank; nullopt: none).
  struct Snapshot {
    uint64_t generation = 0;  ///< 0: no read completed yet; then 1, 2, ...
    std::vector<std::optional<detail::ProgressRecord>> records;
  };

  /// Starts reading the records of ranks [0, world_size) under `prefix`
  /// (detail::attempt_prefix) from the store at addr:port, every `interval`.
  ProgressReader(const std::string& addr, int port, const std::string& prefix, int world_size,
                 std::chrono::milliseconds interval);
  /// Stops the thread, waiting for it at most 1 s (one stuck on the store is
  /// left to end with the process; it owns what it uses).
  ~ProgressReader();
  ProgressReader(const ProgressReader&) = delete;
  ProgressReader& operator=(const ProgressReader&) = delete;

  /// The latest complete read; never blocks on the store.
  Snapshot latest() const;

  struct State;  // shared with the thread

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace launch
}  // namespace rankwise
