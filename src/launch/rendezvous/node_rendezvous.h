#pragma once
/// \file node_rendezvous.h
/// Static rendezvous of the launchers of a job over c10d's TCPStore: node 0
/// hosts the store at MASTER_ADDR:MASTER_PORT (the workers connect to it as
/// clients), every node registers under `rankwise/nodes/<node_rank>` and waits
/// until all nodes have.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rankwise/error.h"
#include "launch/rendezvous/group_failure.h"

namespace c10d {
class TCPStore;
}

namespace rankwise::launch::rendezvous {

/// A node that joins belongs to another job than node 0's: its --rdzv-id or
/// its RANKWISE_JOB_KEY differs. The message names both ids (or both key
/// fingerprints). Bad configuration: the launcher exits 2.
class JobMismatchError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

/// What node 0 publishes (publish_identity()) for the nodes that join to
/// check (check_identity()) before they write any key of the job.
struct JobIdentity {
  std::string id;               ///< --rdzv-id (--run-id), "none" by default
  std::string key_fingerprint;  ///< job_key_fingerprint() of its job key
  int nnodes = 0;               ///< --nnodes, its MAX for a range (every node must give the same)
  int min_nnodes = 0;           ///< --nnodes MIN:MAX's MIN; nnodes for a fixed count
  int nproc_per_node = 0;       ///< --nproc-per-node, resolved (the same on every node)
};

/// A short name of the job key that does not give the key away, for
/// messages: "none" for no key, else the first 8 hex digits of the key's
/// 64-bit FNV-1a hash (the same on every build and node).
std::string job_key_fingerprint(const std::string& job_key);

/// The store key of node 0's JobIdentity (JSON). It is outside the job key's
/// prefix, so that a node with another key can read it and say so.
constexpr const char* kJobIdentityKey = "rankwise/job_identity";

/// The launcher's connection to the job's store, alive for the whole run.
class NodeRendezvous {
 public:
  /// Node 0 (`host_store`): hosts the store on `port`; throws RendezvousError
  /// when the port cannot be bound. Other nodes: connect to addr:port,
  /// retrying until `timeout`; throws RendezvousError when unreachable.
  NodeRendezvous(const std::string& addr, int port, bool host_store,
                 std::chrono::milliseconds timeout, const std::string& job_key = "",
                 std::chrono::milliseconds silence_limit = kLauncherSilenceLimit);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  /// Node 0 of a multi-node job, right after hosting the store: publishes
  /// `identity` under kJobIdentityKey (waits at most `timeout` for the
  /// store). Throws RendezvousError when the store fails.
  void publish_identity(const JobIdentity& identity, std::chrono::milliseconds timeout);

  /// Every other node of a multi-node job, before it writes anything in the
  /// store: waits until node 0 has published its identity (polling every
  /// 100 ms on a thread of its own, as join()), at most `timeout`, and
  /// compares it with `mine`. Returns false when `interrupted` returned true.
  /// Throws JobMismatchError naming both ids, or both key fingerprints
  /// ("RANKWISE_JOB_KEY differs from node 0's"); RendezvousError when
  /// nothing was published by the timeout or the store failed.
  bool check_identity(const JobIdentity& mine, std::chrono::milliseconds timeout,
                      const std::function<bool()>& interrupted);

  /// --rdzv-backend c10d without --node-rank, on a node that does not host
  /// the store (after check_identity()): takes the next node rank, 1, 2, ...,
  /// from the counter `<job prefix>node_ranks` (waits at most `timeout`).
  /// Throws RendezvousError when ranks [1, nnodes) are all taken already.
  int take_node_rank(int nnodes, std::chrono::milliseconds timeout);

  /// Registers this node and waits until nodes [0, nnodes) all registered.
  /// With one node it touches no store (there is nobody to wait for).
  /// The store is called on a thread of its own, so that `interrupted`, polled
  /// every 100 ms, is answered even while the store does not answer; when it
  /// returns true join() returns false. Throws RendezvousError naming the
  /// missing node ranks at `timeout`, or saying that the store stopped
  /// answering.
  /// `round` 0 is the job's start; round n > 0 is the rendezvous before
  /// restart n, which every node joins after its workers of attempt n - 1
  /// ended (so no old worker outlives the round). A node that left the job
  /// (close()) ends the wait at once with RendezvousError giving its reason.
  bool join(int node_rank, int nnodes, const std::string& host, std::chrono::milliseconds timeout,
            const std::function<bool()>& interrupted, int round = 0);

  /// Multi-node: marks the job closed by node `node_rank` on `host` (the
  /// first one stays, see closed_key()), so that a node waiting for a
  /// restart round or running an attempt stops; the reason the others read is
  /// "node <node_rank> (host <host>) left the job: <why>", e.g. why = "its
  /// workers succeeded" (`succeeded`: not a failure, for the nodes still
  /// running); `last_attempt`: the last attempt this node ran (-1: none).
  /// Waits at most 2 s; never throws.
  void close(int node_rank, const std::string& host, const std::string& why, bool succeeded, int last_attempt);

  /// Exit barrier (multi-node): marks this node finished and waits until all
  /// `nnodes` nodes did, at most `timeout`, so that node 0 keeps the store up
  /// while other nodes' workers may still use it. Returns early when
  /// `interrupted` returns true or the store is gone (nullopt), or when
  /// another node failed in the last attempt (`attempt_prefix`; "" not to
  /// look) or left the job without success: then that failure, for this node
  /// to report. With an `attempt_prefix` (this node's workers succeeded) a
  /// node whose launcher stopped answering (launcher_heartbeat.h) ends the
  /// wait too, and so does the store going away before every node finished
  /// (node 0 lost): both reported as `silent` failures. Nodes in `gone`
  /// (known to have stopped answering) are not waited for. The store's host,
  /// once all finished, waits up to 2 s more for the other nodes to end.
  /// After 2 s of waiting, calls `still_waiting` once (from another thread)
  /// with how many nodes have finished, for the launcher to say what it
  /// waits for. Never throws.
  std::optional<NodeFailure> leave(int node_rank, int nnodes, std::chrono::milliseconds timeout,
                                   const std::function<bool()>& interrupted,
                                   const std::string& attempt_prefix,
                                   const std::function<void(int)>& still_waiting,
                                   const std::vector<int>& gone = {});

  /// Port of the store.
  int port() const { return port_; }

  /// Elastic rounds (elastic_agent.h): from now on join(), leave() and
  /// close() keep their keys under `job_key` (the round's round_job_key()).
  void set_job_key(const std::string& job_key) { job_key_ = job_key; }

  /// The connection to the store (shared with the threads that use it).
  std::shared_ptr<c10d::TCPStore> store() const { return store_; }

 private:
  // Shared with the threads that call it (join, leave), which may outlive a
  // call that stopped waiting for them.
  std::shared_ptr<c10d::TCPStore> store_;
  std::string addr_;
  int port_;
  std::string job_key_;  // see node_key
  std::chrono::milliseconds silence_limit_;  // leave(): a silent node is lost after it
  bool host_store_;
};

/// Whether the store node 0 hosts listens on the master address only (the
/// loopback address for a one-node job): true with libtorch 2.x, whose store
/// takes a socket the launcher bound; false with 1.13, whose store listens on
/// every interface.
bool store_listens_on_master_address_only();

/// The store key under which node `node_rank` registers in rendezvous
/// `round`: under the job key when there is one ("rankwise/<job key>/nodes/<n>",
/// "rankwise/<job key>/round_<r>/nodes/<n>"), so that a client without it
/// cannot register a node that never came.
std::string node_key(const std::string& job_key, int node_rank, int round = 0);

}  // namespace rankwise::launch::rendezvous
