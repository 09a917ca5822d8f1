#include "launch/rendezvous/launcher_heartbeat.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fmt/format.h>

#include <algorithm>

#include "wire/collective_progress.h"

namespace rankwise::launch::rendezvous {

std::string heartbeat_key(const std::string& job_key, int node_rank) {
  return fmt::format("{}launchers/{}/heartbeat", rankwise::wire::job_prefix(job_key), node_rank);
}

std::string exited_key(const std::string& job_key, int node_rank) {
  return fmt::format("{}launchers/{}/exited", rankwise::wire::job_prefix(job_key), node_rank);
}

LauncherHeartbeat::LauncherHeartbeat(const std::string& addr, int port,
                                     const std::string& job_key, int node_rank)
    : exited_key_(exited_key(job_key, node_rank)),
      poller_(addr, port, kHeartbeatInterval,
              [key = heartbeat_key(job_key, node_rank)](c10d::TCPStore& store) {
                store.add(key, 1);
              }) {}

LauncherHeartbeat::~LauncherHeartbeat() {
  poller_.post([key = exited_key_](c10d::TCPStore& store) { store.set(key, {'1'}); });
  poller_.flush(std::chrono::seconds(1));
}

HeartbeatReading read_heartbeats(c10d::TCPStore& store, const std::string& job_key, int nnodes,
                                 int self, const std::vector<int>& skip) {
  HeartbeatReading reading;
  for (int n = 0; n < nnodes; ++n) {
    if (n == self || std::find(skip.begin(), skip.end(), n) != skip.end()) continue;
    if (store.check({exited_key(job_key, n)})) {
      reading.exited.push_back(n);
    } else {
      reading.beats[n] = store.add(heartbeat_key(job_key, n), 0);
    }
  }
  return reading;
}

void SilenceTracker::record(const HeartbeatReading& reading, Clock::time_point now) {
  for (const auto& [node, counter] : reading.beats) seen(node, counter, now);
  for (const int node : reading.exited) forget(node);
}

void SilenceTracker::seen(int node_rank, std::int64_t counter, Clock::time_point now) {
  const auto it = nodes_.find(node_rank);
  if (it == nodes_.end() || it->second.counter != counter) nodes_[node_rank] = {counter, now};
}

std::optional<std::pair<int, std::chrono::milliseconds>> SilenceTracker::silent(
    Clock::time_point now) const {
  for (const auto& [node, s] : nodes_) {
    const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - s.changed);
    if (quiet >= limit_) return std::make_pair(node, quiet);
  }
  return std::nullopt;
}

}  // namespace rankwise::launch::rendezvous
