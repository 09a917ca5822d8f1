#pragma once
/// \file progress_reader.h
/// Reads every rank's progress record (detail/progress_record.h) from the
/// job's store on a thread of its own (a StorePoller), so that the launcher's
/// main loop never waits on the store.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detail/progress_record.h"
#include "launch/store_poller.h"

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

  /// The latest complete read; never blocks on the store.
  Snapshot latest() const;

  struct State;  // shared with the thread

 private:
  std::shared_ptr<State> state_;
  StorePoller poller_;  // after state_, which it uses
};

}  // namespace launch
}  // namespace rankwise
