#pragma once
/// \file launcher_heartbeat.h
/// Multi-node: every launcher's sign of life in the job's store, so that the
/// other nodes name a launcher that can no longer say anything (killed with
/// SIGKILL, stopped, its host down) instead of waiting for it. Each launcher
/// adds 1 to its counter every second (kHeartbeatInterval) for as long as it
/// runs, between attempts and in the exit barrier too, and marks itself
/// exited when it ends; a node whose counter has not moved for the silence
/// limit (LaunchOptions::launcher_silence_limit: by default
/// kLauncherSilenceLimit, 15 s, as torchelastic's c10d rendezvous keep-alive
/// of 5 s interval and 3 missed beats; --rdzv-conf keep_alive_interval and
/// keep_alive_max_attempt set it) is reported by the others'
/// GroupFailureWatch (group_failure.h), as is node 0 when its store has not
/// answered for as long. Keys: `<job prefix>launchers/<node rank>/heartbeat` and `.../exited`.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launch/rendezvous/store_poller.h"

namespace c10d {
class TCPStore;
}

namespace rankwise::launch::rendezvous {

constexpr std::chrono::milliseconds kHeartbeatInterval{1000};
constexpr std::chrono::milliseconds kLauncherSilenceLimit{15000};

std::string heartbeat_key(const std::string& job_key, int node_rank);
std::string exited_key(const std::string& job_key, int node_rank);

/// This launcher's heartbeat, on a store client and thread of its own
/// (StorePoller): never blocks the caller.
class LauncherHeartbeat {
 public:
  LauncherHeartbeat(const std::string& addr, int port, const std::string& job_key, int node_rank);
  /// Marks this node exited (waiting at most 1 s for the store), so that the
  /// nodes still running do not report it as silent.
  ~LauncherHeartbeat();
  LauncherHeartbeat(const LauncherHeartbeat&) = delete;
  LauncherHeartbeat& operator=(const LauncherHeartbeat&) = delete;

 private:
  std::string exited_key_;
  StorePoller poller_;
};

/// One read of the other launchers' heartbeats from the store: each watched
/// node's counter, or that it marked itself exited.
struct HeartbeatReading {
  std::map<int, std::int64_t> beats;  ///< node rank -> counter
  std::vector<int> exited;            ///< node ranks that marked themselves exited
};

/// Reads the heartbeats of nodes [0, nnodes) except `self` and those in
/// `skip` (two store calls per node). Throws what the store throws.
HeartbeatReading read_heartbeats(c10d::TCPStore& store, const std::string& job_key, int nnodes,
                                 int self, const std::vector<int>& skip = {});

/// Which watched node's heartbeat stopped: fed each node's counter as read
/// from the store, with the time it was read; a node is silent once its
/// counter has not changed for `limit` since it was first seen.
class SilenceTracker {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SilenceTracker(std::chrono::milliseconds limit) : limit_(limit) {}

  void seen(int node_rank, std::int64_t counter, Clock::time_point now);
  /// No longer watched (it marked itself exited).
  void forget(int node_rank) { nodes_.erase(node_rank); }
  /// seen() for every counter of `reading`, forget() for every exited node.
  void record(const HeartbeatReading& reading, Clock::time_point now);
  /// The lowest silent node rank as of `now`, with how long it has been
  /// silent; nullopt when none is.
  std::optional<std::pair<int, std::chrono::milliseconds>> silent(Clock::time_point now) const;

 private:
  struct Seen {
    std::int64_t counter;
    Clock::time_point changed;
  };
  std::chrono::milliseconds limit_;
  std::map<int, Seen> nodes_;
};

}  // namespace rankwise::launch::rendezvous
