#include "launch/elastic_agent.h"

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>

#include "launch/attempt_loop.h"
#include "launch/rendezvous/elastic_rendezvous.h"
#include "launch/rendezvous/exit_barrier.h"
#include "launch/rendezvous/launcher_heartbeat.h"
#include "launch/output/say.h"
#include "launch/workers/signals.h"
#include "launch/rendezvous/store_poller.h"
#include "launch/workers/summary.h"
#include "launch/workers/worker_group.h"

namespace rankwise::launch {

namespace {

// How often a running round looks for a node waiting to join.
constexpr std::chrono::milliseconds kNewcomerPoll{500};

// What ElasticRendezvous::end_job() records: whether the job succeeded, and why.
std::string ended(bool succeeded, const std::string& reason) {
  return nlohmann::json{{"succeeded", succeeded}, {"reason", reason}}.dump();
}

// The members of `before` that are not in `now`, named as in `before`.
std::string who_left(const rendezvous::ElasticRound& before, const rendezvous::ElasticRound& now) {
  std::string text;
  for (std::size_t n = 0; n < before.members.size(); ++n) {
    const rendezvous::ElasticMember& m = before.members[n];
    const bool stayed = std::any_of(now.members.begin(), now.members.end(),
                                    [&](const rendezvous::ElasticMember& x) { return x.id == m.id; });
    if (stayed) continue;
    text += fmt::format("{}{}", text.empty() ? "" : ", ",
                        rendezvous::describe_member(static_cast<int>(n), m));
  }
  return text;
}

}  // namespace

namespace {

// How a round's nodes met (ElasticMembership::meet_round_nodes).
enum class RoundStart { kStarted, kFailed, kInterrupted };

// This node's rounds, from its first join to the end of the job: each round
// is an attempt of the loop (attempt_loop.h) with that round's nodes.
class ElasticMembership : public AttemptMembership {
 public:
  ElasticMembership(const LaunchOptions& o, ElasticSetup setup, rendezvous::NodeRendezvous& rdzv)
      : o_(o),
        setup_(std::move(setup)),
        rdzv_(rdzv),
        elastic_(rdzv.store(), fmt::format("{}:{}", o.master_addr, rdzv.port()), setup_.job_key,
                 rendezvous::ElasticLimits{o.min_nnodes, o.nnodes, o.rendezvous_timeout,
                                           o.last_call_timeout, o.launcher_silence_limit}),
        me_{elastic_.take_member_id(setup_.host_store, setup_.store_timeout), setup_.host,
            static_cast<int>(::getpid())} {}

  // The next round this node is let into, its nodes met; nullptr when that
  // round could not start (the next one follows).
  workers::AttemptConfig* meet(std::optional<int>& exit_code) override {
    heartbeat_.reset();  // the last round's, kept through its exit barrier
    std::optional<rendezvous::ElasticRound> round;
    if ((exit_code = join_round(round))) return nullptr;
    say_round(*round);
    round_ = *round;
    const int nodes = static_cast<int>(round_.members.size());
    round_options_ = o_;  // this round's view: a fixed node count
    round_options_.nnodes = round_options_.min_nnodes = nodes;
    round_options_.node_rank = round_.node_rank;
    const std::string key = rendezvous::round_job_key(setup_.job_key, round_.round);
    rdzv_.set_job_key(key);
    config_ = workers::attempt_config(round_options_, rdzv_.port(), setup_.host, setup_.error_dir,
                                      setup_.base_env, key);
    config_.attempt = round_.round;
    previous_ = round_;
    next_round_ = round_.round + 1;
    switch (meet_round_nodes()) {
      case RoundStart::kStarted:
        break;
      case RoundStart::kFailed:
        return nullptr;
      case RoundStart::kInterrupted:
        exit_code = 128 + pending_;
        return nullptr;
    }
    if (nodes > 1) heartbeat_.emplace(o_.master_addr, rdzv_.port(), key, round_.node_rank);
    newcomer_ = std::make_shared<std::atomic<bool>>(false);
    if (nodes < o_.nnodes) {
      watch_for_newcomers();
      config_.membership_changed = [newcomer = newcomer_] { return newcomer->load(); };
    }
    return &config_;
  }

  void attempt_ended() override {
    watch_.reset();
    elastic_.end_round(round_.round);  // the next round may close
  }

  std::string attempt_name() const override { return fmt::format("round {}", round_.round); }
  std::string restart_how() const override { return " in a new rendezvous round"; }

  bool failed(const workers::FailureReport& failure) override {
    if (!newcomer_->load()) return false;
    output::say(fmt::format("round {} ended ({}) while a node waited to join; a new round (not "
                            "counted as a restart)",
                            round_.round, workers::one_line_cause(failure)));
    return true;
  }

  int succeeded() override {
    const int code =
        rendezvous::exit_barrier(round_options_, setup_.host_store, kExitOk, config_, rdzv_);
    elastic_.end_job(ended(code == kExitOk,
                           fmt::format("round {} ({} nodes) {}", round_.round, round_.members.size(),
                                       code == kExitOk ? "succeeded" : "failed")));
    return code;
  }

  // The other nodes of the round stop too, name this one, and go on without
  // it in the next round.
  int signaled(const workers::AttemptResult& result) override {
    const int code = workers::signaled_exit_code(result);
    rdzv_.close(round_options_.node_rank, setup_.host,
                fmt::format("it received {}", workers::signal_name(result.signal)), false,
                round_.round);
    return code;
  }

  int gave_up(const workers::FailureReport& failure) override {
    rdzv_.close(round_options_.node_rank, setup_.host,
                fmt::format("it gave up ({} restarts allowed)", o_.max_restarts), false,
                round_.round);
    elastic_.end_job(ended(false, fmt::format("round {} failed: {}", round_.round,
                                              workers::one_line_cause(failure))));
    return rendezvous::exit_barrier(round_options_, setup_.host_store, kExitWorkerFailed, config_,
                                    rdzv_);
  }

 private:
  bool interrupted() { return (pending_ = workers::drain_stop_signal()) != 0; }

  // The next round this node is let into, in `round`; else the exit code (the
  // job ended meanwhile, or a signal).
  std::optional<int> join_round(std::optional<rendezvous::ElasticRound>& round) {
    try {
      round = elastic_.join(next_round_, me_, [this] { return interrupted(); });
    } catch (const rendezvous::ElasticJobEnded& e) {
      const auto j = nlohmann::json::parse(e.what(), nullptr, false);
      const bool ok = j.is_object() && j.value("succeeded", false);
      output::say(fmt::format("the job ended before this node was let in: {}",
                              j.is_object() ? j.value("reason", std::string(e.what())) : e.what()));
      return ok ? kExitOk : kExitWorkerFailed;
    }
    if (!round) {
      output::say(fmt::format("received {} during the rendezvous; exiting",
                              workers::signal_name(pending_)));
      return 128 + pending_;
    }
    return std::nullopt;
  }

  void say_round(const rendezvous::ElasticRound& round) const {
    const int nodes = static_cast<int>(round.members.size());
    const std::string left = previous_ ? who_left(*previous_, round) : "";
    output::say(fmt::format(
        "rendezvous round {}: {} node{} ({}), world size {}; this is node {}{}", round.round, nodes,
        nodes == 1 ? "" : "s", rendezvous::describe_members(round.members),
        nodes * o_.nproc_per_node, round.node_rank,
        left.empty() ? "" : fmt::format("; left since round {}: {}", previous_->round, left)));
  }

  // Every node of the round names itself under the round's key (for the
  // failure watch and the exit barrier) and waits for the others.
  RoundStart meet_round_nodes() {
    const LaunchOptions& ro = round_options_;
    try {
      if (!rdzv_.join(ro.node_rank, ro.nnodes, setup_.host, o_.rendezvous_timeout,
                      [this] { return interrupted(); })) {
        output::say(fmt::format("received {} during the rendezvous; exiting",
                                workers::signal_name(pending_)));
        // The round's other nodes stop waiting for this one at once.
        rdzv_.close(ro.node_rank, setup_.host,
                    fmt::format("it received {}", workers::signal_name(pending_)), false,
                    round_.round);
        elastic_.end_round(round_.round);
        return RoundStart::kInterrupted;
      }
    } catch (const RendezvousError& e) {
      output::say(fmt::format("rendezvous round {} could not start: {}; joining the next round",
                              round_.round, e.what()));
      elastic_.end_round(round_.round);
      return RoundStart::kFailed;
    }
    return RoundStart::kStarted;
  }

  // A round with fewer than MAX nodes: sets newcomer_ when a node not in it
  // waits to join.
  void watch_for_newcomers() {
    std::vector<int> ids;
    for (const rendezvous::ElasticMember& m : round_.members) ids.push_back(m.id);
    watch_.emplace(
        o_.master_addr, rdzv_.port(), kNewcomerPoll,
        [newcomer = newcomer_, job_key = setup_.job_key, next = next_round_, ids](c10d::TCPStore& store) {
          if (rendezvous::newcomer_waiting(store, job_key, next, ids)) *newcomer = true;
        });
  }

  const LaunchOptions& o_;
  const ElasticSetup setup_;
  rendezvous::NodeRendezvous& rdzv_;
  rendezvous::ElasticRendezvous elastic_;
  const rendezvous::ElasticMember me_;
  int pending_ = 0;  // the signal that interrupted a rendezvous
  int next_round_ = 0;
  std::optional<rendezvous::ElasticRound> previous_;
  // The round met last, its options (config_.options points here) and what
  // runs beside its attempt.
  rendezvous::ElasticRound round_;
  LaunchOptions round_options_;
  workers::AttemptConfig config_;
  std::optional<rendezvous::LauncherHeartbeat> heartbeat_;
  std::shared_ptr<std::atomic<bool>> newcomer_ = std::make_shared<std::atomic<bool>>(false);
  std::optional<rendezvous::StorePoller> watch_;
};

}  // namespace

int run_elastic(const LaunchOptions& o, ElasticSetup setup, rendezvous::NodeRendezvous& rdzv) {
  ElasticMembership membership(o, std::move(setup), rdzv);
  return run_attempt_loop(membership, o.max_restarts);
}

}  // namespace rankwise::launch
