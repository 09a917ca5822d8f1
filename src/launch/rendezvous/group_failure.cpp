#include "launch/rendezvous/group_failure.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "wire/collective_progress.h"
#include "launch/rendezvous/launcher_heartbeat.h"
#include "launch/rendezvous/node_rendezvous.h"

namespace rankwise::launch::rendezvous {

std::string failure_key(const std::string& attempt_prefix) {
  return attempt_prefix + "/launchers/failure";
}

std::string closed_key(const std::string& job_key) {
  return rankwise::wire::job_prefix(job_key) + "closed";
}

std::string encode_failure(const NodeFailure& f) {
  return nlohmann::json{{"node_rank", f.node_rank},
                        {"root_cause", f.root_cause},
                        {"error", f.error},
                        {"succeeded", f.succeeded},
                        {"attempt", f.attempt}}
      .dump();
}

std::optional<NodeFailure> decode_failure(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  try {
    NodeFailure f;
    f.node_rank = j.at("node_rank").get<int>();
    f.root_cause = j.at("root_cause").get<std::string>();
    f.error = j.at("error").get<std::string>();
    f.succeeded = j.value("succeeded", false);
    f.attempt = j.value("attempt", -1);
    return f;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

struct GroupFailureWatch::State {
  using Clock = std::chrono::steady_clock;
  std::mutex mutex;
  std::optional<NodeFailure> first;
  explicit State(std::chrono::milliseconds limit) : silence(limit), silence_limit(limit) {}
  SilenceTracker silence;
  const std::chrono::milliseconds silence_limit;
  Clock::time_point store_answered = Clock::now();  // the last poll that succeeded
  Clock::time_point heartbeats_read{};               // when the others' were last read
  std::map<int, std::string> hosts;                  // node rank -> host, as each joined
  bool read = false;                                 // a poll has succeeded
  std::condition_variable read_once;
};

namespace {
std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// "node 0 (host n0)", or "node 0" when `hosts` lacks it.
std::string named(const std::map<int, std::string>& hosts, int n) {
  const auto host = hosts.find(n);
  return host == hosts.end() ? fmt::format("node {}", n)
                             : fmt::format("node {} (host {})", n, host->second);
}
}  // namespace

void publish_first(c10d::TCPStore& store, const std::string& key, const NodeFailure& failure) {
  // Sets the key only where it is absent; either way returns what it holds.
  store.compareSet(key, {}, bytes(encode_failure(failure)));
}

GroupFailureWatch::GroupFailureWatch(const std::string& addr, int port,
                                     const std::string& attempt_prefix,
                                     const std::string& job_key,
                                     std::chrono::milliseconds interval, int node_rank,
                                     int nnodes, std::chrono::milliseconds silence_limit)
    : failure_key_(failure_key(attempt_prefix)),
      final_key_(failure_key_ + "_final"),
      closed_key_(closed_key(job_key)),
      state_(std::make_shared<State>(silence_limit)),
      store_address_(fmt::format("{}:{}", addr, port)),
      node_rank_(node_rank),
      poller_(addr, port, interval,
              [state = state_, failure_key = failure_key_, final_key = final_key_,
               closed = closed_key_, job_key, node_rank, nnodes](c10d::TCPStore& store) {
                std::optional<NodeFailure> first;
                if (auto text = read_if_set(store, final_key)) {
                  first = decode_failure(*text);
                  if (first) first->final = true;
                } else if (auto text = read_if_set(store, failure_key)) {
                  first = decode_failure(*text);
                } else if (auto text = read_if_set(store, closed)) {
                  // A node whose workers all succeeded is no failure.
                  first = decode_failure(*text);
                  if (first && first->succeeded) first.reset();
                  if (first) first->left = true;
                }
                // The other launchers' heartbeats, once per heartbeat interval.
                const auto now = State::Clock::now();
                bool read_beats = false;
                std::map<int, std::string> hosts;
                {
                  std::lock_guard<std::mutex> lock(state->mutex);
                  read_beats = now - state->heartbeats_read >= kHeartbeatInterval;
                  hosts = state->hosts;
                }
                HeartbeatReading beats;
                if (read_beats) {
                  beats = read_heartbeats(store, job_key, nnodes, node_rank);
                  for (int n = 0; n < nnodes; ++n) {
                    if (n == node_rank || hosts.count(n) != 0) continue;
                    if (auto host = read_if_set(store, node_key(job_key, n))) hosts[n] = *host;
                  }
                }
                std::lock_guard<std::mutex> lock(state->mutex);
                if (first) state->first = first;
                state->store_answered = now;
                state->hosts = hosts;
                if (read_beats) {
                  state->heartbeats_read = now;
                  state->silence.record(beats, now);
                }
                state->read = true;
                state->read_once.notify_all();
              }) {}

bool GroupFailureWatch::wait_until_read(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->read_once.wait_for(lock, timeout, [this] { return state_->read; });
}

std::string GroupFailureWatch::node_name(int node_rank) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return named(state_->hosts, node_rank);
}

void GroupFailureWatch::report(const NodeFailure& failure) {
  poller_.post([key = failure_key_, failure](c10d::TCPStore& store) {
    publish_first(store, key, failure);
  });
}

void GroupFailureWatch::report_final(const NodeFailure& failure) {
  poller_.post([key = final_key_, value = encode_failure(failure)](c10d::TCPStore& store) {
    store.set(key, bytes(value));
  });
}

std::optional<NodeFailure> GroupFailureWatch::first() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->first) return state_->first;
  const auto now = State::Clock::now();
  const auto seconds = [](auto d) {
    return std::chrono::duration_cast<std::chrono::seconds>(d).count();
  };
  // Node 0's store gone is node 0's launcher gone: say so rather than that
  // its heartbeat stopped (which can cross the limit first: it is measured
  // from its last change).
  const auto quiet = state_->silence.silent(now);
  const auto unanswered = now - state_->store_answered;
  if (node_rank_ != 0 && unanswered >= 3 * kHeartbeatInterval &&
      (unanswered >= state_->silence_limit || (quiet && quiet->first == 0))) {
    return lost_store_failure(
        named(state_->hosts, 0), store_address_,
        fmt::format("no store call has succeeded for {} s", seconds(unanswered)));
  }
  if (quiet) {
    return silent_launcher_failure(quiet->first, named(state_->hosts, quiet->first), quiet->second);
  }
  return std::nullopt;
}

NodeFailure silent_launcher_failure(int node_rank, const std::string& node,
                                    std::chrono::milliseconds quiet) {
  NodeFailure f;
  f.left = true;
  f.silent = true;
  f.node_rank = node_rank;
  f.root_cause = fmt::format(
      "{}'s launcher stopped answering: its heartbeat in the store has not changed for {} s (it "
      "was killed, e.g. with SIGKILL, or stopped, or its host is down)",
      node, std::chrono::duration_cast<std::chrono::seconds>(quiet).count());
  return f;
}

NodeFailure lost_store_failure(const std::string& node, const std::string& store_address,
                               const std::string& why) {
  NodeFailure f;
  f.left = true;
  f.silent = true;
  f.node_rank = 0;
  f.root_cause = fmt::format(
      "{}'s launcher, which hosts the rendezvous store at {}, stopped answering: {} (it was "
      "killed, e.g. with SIGKILL, or its host is down or unreachable)",
      node, store_address, why);
  return f;
}

}  // namespace rankwise::launch::rendezvous
