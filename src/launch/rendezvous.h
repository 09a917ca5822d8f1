#pragma once
/// \file rendezvous.h
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

#include "launch/group_failure.h"

namespace c10d {
class TCPStore;
}

namespace rankwise {
namespace launch {

/// The store could not be hosted or reached, or a node never arrived. The
/// message names the address, the timeout and the missing node ranks.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The launcher's connection to the job's store, alive for the whole run.
class NodeRendezvous {
 public:
  /// Node 0 (`host_store`): hosts the store on `port`; throws RendezvousError
  /// when the port cannot be bound. Other nodes: connect to addr:port,
  /// retrying until `timeout`; throws RendezvousError when unreachable.
  NodeRendezvous(const std::string& addr, int port, bool host_store,
                 std::chrono::milliseconds timeout, const std::string& job_key = "");
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

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

  /// Multi-node: marks the job closed by node `node_rank` (the first one
  /// stays, see closed_key()), so that a node waiting for a restart round or
  /// running an attempt stops; `reason` e.g. "node 0 (host n0) left the job:
  /// its workers succeeded" (`succeeded`: not a failure, for the nodes still
  /// running); `last_attempt`: the last attempt this node ran (-1: none).
  /// Waits at most 2 s; never throws.
  void close(int node_rank, const std::string& reason, bool succeeded, int last_attempt);

  /// Exit barrier (multi-node): marks this node finished and waits until all
  /// `nnodes` nodes did, at most `timeout`, so that node 0 keeps the store up
  /// while other nodes' workers may still use it. Returns early when
  /// `interrupted` returns true or the store is gone (nullopt), or when
  /// another node failed in the last attempt (`attempt_prefix`; "" not to
  /// look) or left the job without success: then that failure, for this node
  /// to report. Never throws.
  std::optional<NodeFailure> leave(int node_rank, int nnodes, std::chrono::milliseconds timeout,
                                   const std::function<bool()>& interrupted,
                                   const std::string& attempt_prefix);

  /// Port of the store.
  int port() const { return port_; }

 private:
  // Shared with the threads that call it (join, leave), which may outlive a
  // call that stopped waiting for them.
  std::shared_ptr<c10d::TCPStore> store_;
  std::string addr_;
  int port_;
  std::string job_key_;  // see node_key
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

}  // namespace launch
}  // namespace rankwise
