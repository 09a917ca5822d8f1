#pragma once
/// \file collective_progress_reader.h
/// Reads every rank's collective progress record (wire/collective_progress.h) from the
/// job's store on a thread of its own (a StorePoller), so that the launcher's
/// main loop never waits on the store.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wire/collective_progress.h"
#include "launch/rendezvous/store_poller.h"

namespace rankwise::launch::watch {

class CollectiveProgressReader {
 public:
  /// One complete read of every rank's record (index = rank; nullopt: none).
  struct Snapshot {
    uint64_t generation = 0;  ///< 0: no read completed yet; then 1, 2, ...
    /// The last request_read() ticket whose read is done (0: none).
    uint64_t served = 0;
    std::vector<std::optional<wire::CollectiveProgress>> records;
  };

  /// Starts reading the records of ranks [0, world_size) under `prefix`
  /// (detail::attempt_prefix) from the store at addr:port, every `interval`.
  CollectiveProgressReader(const std::string& addr, int port, const std::string& prefix, int world_size,
                 std::chrono::milliseconds interval);

  /// The latest complete read; never blocks on the store.
  Snapshot latest() const;

  /// Asks for a read that begins after this call, ahead of the next
  /// interval; never blocks. Its ticket: latest().served reaches it when the
  /// read is done.
  uint64_t request_read();

  /// A read that begins after this call, waiting for it at most `timeout`
  /// (else the latest one): for the end of an attempt, after the workers'
  /// last heartbeats.
  Snapshot read_now(std::chrono::milliseconds timeout);

  struct State;  // shared with the thread

 private:
  std::shared_ptr<State> state_;
  rendezvous::StorePoller poller_;  // after state_, which it uses
};

}  // namespace rankwise::launch::watch
