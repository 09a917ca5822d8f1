// NodeRendezvous::leave(): the exit barrier. Each node marks itself finished
// and waits until every node that is not gone did, or one failed, left or
// stopped answering (node_rendezvous.h).
#include "launch/rendezvous/node_rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "launch/rendezvous/group_failure.h"
#include "launch/rendezvous/off_thread.h"
#include "launch/rendezvous/store_poller.h"
#include "wire/store_keys.h"

namespace rankwise::launch::rendezvous {
namespace {
using SteadyClock = std::chrono::steady_clock;
}  // namespace

namespace {
// How long leave() waits quietly before it says what it waits for.
constexpr std::chrono::seconds kSayStillWaiting{2};

// The exit barrier's counter: nodes that reached leave().
std::string finished_key(const std::string& job_key) {
  return rankwise::wire::job_prefix(job_key) + "finished";
}
}  // namespace

namespace {

// What leave() asks for, copied to its thread.
struct LeaveRequest {
  std::string job_key;
  std::string address;     // host:port of the store, for messages
  bool host = false;       // this launcher hosts the store
  bool succeeded = false;  // this node's workers succeeded
  std::string failed;      // the last attempt's failure key ("" not to look)
  std::string closed;      // the job's closed key ("" not to look)
  int nnodes = 0;
  int node_rank = 0;
  std::vector<int> gone;
  std::chrono::milliseconds silence_limit;
  SteadyClock::time_point start;
  SteadyClock::time_point deadline;
  std::function<void(int)> still_waiting;
};

// "node 2 (host b)", or "node 2" when it never registered.
std::string node_name(c10d::TCPStore& store, const std::string& job_key, int n) {
  const auto h = read_if_set(store, node_key(job_key, n));
  return h ? fmt::format("node {} (host {})", n, *h) : fmt::format("node {}", n);
}

// Another node's failure, or its leaving without success: it will not
// finish.
std::optional<NodeFailure> other_node_failure(c10d::TCPStore& store, const LeaveRequest& req) {
  for (const std::string& key : {req.failed, req.closed}) {
    if (key.empty()) continue;
    const auto text = read_if_set(store, key);
    if (!text) continue;
    auto f = decode_failure(*text);
    if (f && f->node_rank != req.node_rank && !f->succeeded) {
      f->left = key == req.closed;
      return f;
    }
  }
  return std::nullopt;
}

// Marks this node finished and waits until every node not gone did: true
// then; false at the deadline, on `cancel`, or with `failure` set (another
// node failed, left, or stopped answering). Throws what the store throws.
bool wait_for_all_finished(c10d::TCPStore& store, const LeaveRequest& req,
                           std::optional<NodeFailure>& failure, const std::atomic<bool>& cancel) {
  // Nodes known gone (they stopped answering) will not finish.
  const int expected = req.nnodes - static_cast<int>(req.gone.size());
  std::int64_t done = store.add(finished_key(req.job_key), 1);
  bool said = false;
  SilenceTracker silence(req.silence_limit);
  for (;;) {
    // Another node's failure, or its leaving, ends the wait: it will
    // not finish. (Looked at once more after the last node finished:
    // a node that failed marks itself finished too.)
    if (auto f = other_node_failure(store, req)) {
      failure = std::move(f);
      return false;
    }
    if (done >= expected) return true;
    if (SteadyClock::now() >= req.deadline || cancel) return false;
    if (!said && req.still_waiting && SteadyClock::now() - req.start >= kSayStillWaiting) {
      req.still_waiting(static_cast<int>(done));
      said = true;
    }
    // A node that can no longer say anything will not finish either.
    const auto now = SteadyClock::now();
    if (req.succeeded) {
      silence.record(read_heartbeats(store, req.job_key, req.nnodes, req.node_rank, req.gone), now);
    }
    if (const auto quiet = silence.silent(now)) {
      failure = silent_launcher_failure(quiet->first, node_name(store, req.job_key, quiet->first),
                                        quiet->second);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    done = store.add(finished_key(req.job_key), 0);
  }
}

// leave()'s work on a thread of its own (which owns `failure`'s share).
void finish_and_wait(c10d::TCPStore& store, const LeaveRequest& req,
                     std::optional<NodeFailure>& failure, const std::atomic<bool>& cancel) {
  bool all_finished = false;
  try {
    all_finished = wait_for_all_finished(store, req, failure, cancel);
    if (!all_finished || !req.host) return;
    // The store's host stays until every other node has seen that
    // all finished and ended (each marks itself exited), at most 2 s.
    for (auto until = SteadyClock::now() + std::chrono::seconds(2);
         SteadyClock::now() < until && !cancel;) {
      const HeartbeatReading reading =
          read_heartbeats(store, req.job_key, req.nnodes, req.node_rank, req.gone);
      if (reading.beats.empty()) break;  // every other node marked itself exited
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    // The store is gone. Node 0 closes it only after every node has
    // finished, so a node whose workers succeeded and that has not
    // seen all finish lost node 0.
    if (req.succeeded && !req.host && !all_finished) {
      failure = lost_store_failure(
          "node 0", req.address,
          fmt::format("its store went away while this node waited for the others to "
                      "finish ({})",
                      std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
    }
  }
}

}  // namespace

std::optional<NodeFailure> NodeRendezvous::leave(int node_rank, int nnodes,
                                                 std::chrono::milliseconds timeout,
                                                 const std::function<bool()>& interrupted,
                                                 const std::string& attempt_prefix,
                                                 const std::function<void(int)>& still_waiting,
                                                 const std::vector<int>& gone) {
  const auto start = SteadyClock::now();
  auto failure = std::make_shared<std::optional<NodeFailure>>();
  const bool succeeded = !attempt_prefix.empty();
  const LeaveRequest req{job_key_,
                         fmt::format("{}:{}", addr_, port_),
                         host_store_,
                         succeeded,
                         succeeded ? failure_key(attempt_prefix) : std::string(),
                         succeeded ? closed_key(job_key_) : std::string(),
                         nnodes,
                         node_rank,
                         gone,
                         silence_limit_,
                         start,
                         start + timeout,
                         still_waiting};
  try {
    run_off_thread(
        [store = store_, req, failure](const std::atomic<bool>& cancel) {
          finish_and_wait(*store, req, *failure, cancel);
        },
        // Telling the others this node finished gets 2 s even after a failure
        // (timeout 0); a store that does not answer by then is not waited for.
        req.deadline + std::chrono::seconds(4), interrupted);
  } catch (const std::exception&) {
    // Node 0 already closed the store: nothing left to wait for.
  }
  return *failure;
}

}  // namespace rankwise::launch::rendezvous
