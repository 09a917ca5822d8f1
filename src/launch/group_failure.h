#pragma once
/// \file group_failure.h
/// Multi-node jobs fail and restart as one group, as with torchelastic: the
/// launcher whose workers fail first publishes the failure in the job's store
/// (the first one published stays); every other launcher reads it within a
/// poll interval, stops its own workers and names that failure as the job's
/// root cause. Keys: `<attempt prefix>/launchers/failure` (what the failing
/// node knew when it stopped its workers) and `.../failure_final` (its summary's
/// root cause, once its attempt ended).

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launch/store_poller.h"

namespace rankwise {
namespace launch {

/// One node's failure, as the other nodes' launchers report it.
struct NodeFailure {
  int node_rank = 0;
  /// Its summary's root cause line, e.g. "rank 3 (local rank 1) on host n1
  /// (node 1) was killed by SIGKILL (signal 9)" (root_cause_headline()).
  std::string root_cause;
  std::string error;   ///< first line of the root cause's error, "" when none
  bool final = false;  ///< from the node's summary (its attempt had ended)
};

/// JSON text; decode_failure returns nullopt for text that is not one.
std::string encode_failure(const NodeFailure& f);
std::optional<NodeFailure> decode_failure(const std::string& text);

/// One attempt's view of the group's failure, read from the store at
/// addr:port every `interval` on a thread of its own (StorePoller).
class GroupFailureWatch {
 public:
  GroupFailureWatch(const std::string& addr, int port, const std::string& attempt_prefix,
                    std::chrono::milliseconds interval);

  /// Publishes this node's failure unless one was published before (a
  /// compareSet on one key: the first stays). Does not block.
  void report(const NodeFailure& failure);
  /// Publishes the final details of the failure this node published first.
  /// Does not block.
  void report_final(const NodeFailure& failure);
  /// The first failure published in this attempt (its final details when
  /// they came), as of the last read; never blocks.
  std::optional<NodeFailure> first() const;
  /// Waits at most `timeout` until the reports above reached the store.
  bool flush(std::chrono::milliseconds timeout) { return poller_.flush(timeout); }

  struct State;  // shared with the poller's thread

 private:
  std::string failure_key_, final_key_;
  std::shared_ptr<State> state_;
  StorePoller poller_;  // last: it uses the members above
};

}  // namespace launch
}  // namespace rankwise
