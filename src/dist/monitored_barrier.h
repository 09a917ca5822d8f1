#pragma once
// ProcessGroup::monitored_barrier's protocol, through the job's store: each
// rank writes its arrival (the barrier's name and call site) and counts
// itself in; the last one marks the barrier done. A rank that waits names
// the ranks that never arrived when its timeout passes (TimeoutError), a
// rank that exited meanwhile (PeerError), and ranks that reached a different
// barrier (CollectiveMismatchError).
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "wire/collective_progress.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace rankwise::dist {

/// Every rank's published collective progress (index = rank).
using ProgressReader = std::function<std::vector<std::optional<wire::CollectiveProgress>>()>;

class MonitoredBarrier {
 public:
  /// Barrier number `instance` of this group (keys under the group's store),
  /// entered by rank `at` as collective `sequence` from `site` ("file:line").
  MonitoredBarrier(c10d::Store& store, core::At at, std::string name, std::string site,
                   uint64_t instance, uint64_t sequence);

  /// Writes this rank's arrival; the last rank to arrive marks it done. Local.
  void arrive();

  /// Waits until every rank arrived or `timeout` passes (TimeoutError naming
  /// the missing ranks and what they last did; `flush` first publishes this
  /// rank's progress). Unless `wait_all_ranks`, a missing rank that exited is
  /// a PeerError as soon as it is seen. Then checks that every rank reached
  /// a barrier of the same name (CollectiveMismatchError naming each).
  void wait(std::chrono::milliseconds timeout, bool wait_all_ranks, const ProgressReader& progress,
            const std::function<void()>& flush);

 private:
  c10d::Store& store_;
  core::At at_;
  std::string name_;
  std::string site_;
  std::string key_;   // "monitored_barrier/<instance>"
  std::string what_;  // "monitored_barrier 'name' (#seq at site)", as messages name it

  std::string arrived_key(int rank) const;
  bool done() const;
  std::vector<int> missing_ranks() const;
  [[noreturn]] void timed_out(std::chrono::milliseconds timeout, const ProgressReader& progress);
  void check_none_exited(const ProgressReader& progress) const;
  void check_same_barrier() const;
};

}  // namespace rankwise::dist
