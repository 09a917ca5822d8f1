#include "launch/group_failure.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <nlohmann/json.hpp>

#include <mutex>
#include <vector>

#include "detail/progress_record.h"

namespace rankwise {
namespace launch {

std::string failure_key(const std::string& attempt_prefix) {
  return attempt_prefix + "/launchers/failure";
}

std::string closed_key(const std::string& job_key) {
  return rankwise::detail::job_prefix(job_key) + "closed";
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
  std::mutex mutex;
  std::optional<NodeFailure> first;
};

namespace {
std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
}  // namespace

void publish_first(c10d::TCPStore& store, const std::string& key, const NodeFailure& failure) {
  // Sets the key only where it is absent; either way returns what it holds.
  store.compareSet(key, {}, bytes(encode_failure(failure)));
}

GroupFailureWatch::GroupFailureWatch(const std::string& addr, int port,
                                     const std::string& attempt_prefix,
                                     const std::string& job_key,
                                     std::chrono::milliseconds interval)
    : failure_key_(failure_key(attempt_prefix)),
      final_key_(failure_key_ + "_final"),
      closed_key_(closed_key(job_key)),
      state_(std::make_shared<State>()),
      poller_(addr, port, interval,
              [state = state_, failure_key = failure_key_, final_key = final_key_,
               closed = closed_key_](c10d::TCPStore& store) {
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
                std::lock_guard<std::mutex> lock(state->mutex);
                if (first) state->first = first;
              }) {}

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
  return state_->first;
}

}  // namespace launch
}  // namespace rankwise
