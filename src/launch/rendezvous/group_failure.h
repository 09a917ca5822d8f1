#pragma once
/// \file group_failure.h
/// Multi-node jobs fail and restart as one group, as with torchelastic: the
/// launcher whose workers fail first publishes the failure in the job's store
/// (the first one published stays); every other launcher reads it within a
/// poll interval, stops its own workers and names that failure as the job's
/// root cause. Keys: `<attempt prefix>/launchers/failure` (what the failing
/// node knew when it stopped its workers) and `.../failure_final` (its summary's
/// root cause, once its attempt ended); `<job prefix>closed` (closed_key()):
/// a launcher that leaves the job (its workers succeeded, it gave up, it got a
/// signal) says so there, and the other nodes stop waiting for it.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launch/rendezvous/launcher_heartbeat.h"
#include "launch/rendezvous/store_poller.h"

namespace rankwise::launch::rendezvous {

/// One node's failure, as the other nodes' launchers report it.
struct NodeFailure {
  int node_rank = 0;
  /// Its summary's root cause line, e.g. "rank 3 (local rank 1) on host n1
  /// (node 1) was killed by SIGKILL (signal 9)" (root_cause_headline()).
  std::string root_cause;
  std::string error;   ///< first line of the root cause's error, "" when none
  bool final = false;  ///< from the node's summary (its attempt had ended)
  /// Not a worker's failure: the node's launcher left the job (closed_key());
  /// `root_cause` says why, e.g. "node 1 (host n1) left the job: it received
  /// SIGINT".
  bool left = false;
  /// With `left`: the node left because its workers succeeded (not a
  /// failure, but it will not come to a restart).
  bool succeeded = false;
  /// With `left`: the last attempt the node ran (-1: none), so that a
  /// rendezvous round knows whether the node left after it (it took part)
  /// or before.
  int attempt = -1;
  /// Not published by that node: this launcher saw it stop answering (its
  /// heartbeat stopped, or, for node 0, its store; launcher_heartbeat.h).
  bool silent = false;
};

/// The keys: `<attempt prefix>/launchers/failure`, and the job's
/// "rankwise/[<job key>/]closed".
std::string failure_key(const std::string& attempt_prefix);
std::string closed_key(const std::string& job_key);

/// JSON text; decode_failure returns nullopt for text that is not one.
std::string encode_failure(const NodeFailure& f);
std::optional<NodeFailure> decode_failure(const std::string& text);

/// Stores `failure` under `key` unless the key is set already (a compareSet:
/// the first one stays). Throws what the store throws.
void publish_first(c10d::TCPStore& store, const std::string& key, const NodeFailure& failure);

/// A launcher that stopped answering (NodeFailure::silent, left): node
/// `node_rank` (`node`, e.g. "node 1 (host n1)") whose heartbeat has not
/// changed for `quiet`.
NodeFailure silent_launcher_failure(int node_rank, const std::string& node,
                                    std::chrono::milliseconds quiet);
/// Node 0 (`node`), whose store at `store_address` is gone: `why`, e.g. "no
/// store call has succeeded for 15 s".
NodeFailure lost_store_failure(const std::string& node, const std::string& store_address,
                               const std::string& why);

/// One attempt's view of the group's failure, read from the store at
/// addr:port every `interval` on a thread of its own (StorePoller): the first
/// failure published in the attempt, else a node that left the job, else a
/// node whose launcher stopped answering (`silent`): another node's heartbeat
/// unchanged, or node 0's store unreachable, for `silence_limit`.
class GroupFailureWatch {
 public:
  /// `node_rank` is this node's, of `nnodes`.
  GroupFailureWatch(const std::string& addr, int port, const std::string& attempt_prefix,
                    const std::string& job_key, std::chrono::milliseconds interval,
                    int node_rank, int nnodes,
                    std::chrono::milliseconds silence_limit = kLauncherSilenceLimit);

  /// Publishes this node's failure unless one was published before (a
  /// compareSet on one key: the first stays). Does not block.
  void report(const NodeFailure& failure);
  /// Publishes the final details of the failure this node published first.
  /// Does not block.
  void report_final(const NodeFailure& failure);
  /// The first failure published in this attempt (its final details when
  /// they came), else the node that left the job (`left`), as of the last
  /// read; never blocks.
  std::optional<NodeFailure> first() const;
  /// Waits at most `timeout` until the reports above reached the store.
  bool flush(std::chrono::milliseconds timeout) { return poller_.flush(timeout); }
  /// Waits at most `timeout` until the store was read once (the other
  /// nodes' host names with it, for the messages when a node is lost
  /// later); true when it was.
  bool wait_until_read(std::chrono::milliseconds timeout) const;
  /// "node 0 (host n0)", or "node 0" while its host is unknown.
  std::string node_name(int node_rank) const;

  struct State;  // shared with the poller's thread

 private:
  std::string failure_key_, final_key_, closed_key_;
  std::string store_address_;  // addr:port, for the message when it is gone
  int node_rank_;
  std::shared_ptr<State> state_;
  StorePoller poller_;  // last: it uses the members above
};

}  // namespace rankwise::launch::rendezvous
