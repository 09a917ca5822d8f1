#include "launch/elastic_agent.h"

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>

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

// How a round's nodes met (ElasticAgent::meet_round_nodes).
enum class RoundStart { kStarted, kFailed, kInterrupted };

// This node's rounds, from its first join to the end of the job.
class ElasticAgent {
 public:
  ElasticAgent(const LaunchOptions& o, ElasticSetup setup, rendezvous::NodeRendezvous& rdzv)
      : o_(o),
        setup_(std::move(setup)),
        rdzv_(rdzv),
        elastic_(rdzv.store(), fmt::format("{}:{}", o.master_addr, rdzv.port()), setup_.job_key,
                 rendezvous::ElasticLimits{o.min_nnodes, o.nnodes, o.rendezvous_timeout,
                                           o.last_call_timeout, o.launcher_silence_limit}),
        me_{elastic_.take_member_id(setup_.host_store, setup_.store_timeout), setup_.host,
            static_cast<int>(::getpid())} {}

  int run() {
    for (;;) {
      std::optional<rendezvous::ElasticRound> round;
      if (const std::optional<int> code = join_round(round)) return *code;
      if (const std::optional<int> code = run_round(*round)) return *code;
    }
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

  // One round: its attempt and what follows it. The exit code, or nullopt
  // for the next round.
  std::optional<int> run_round(const rendezvous::ElasticRound& round) {
    say_round(round);
    const int nodes = static_cast<int>(round.members.size());
    LaunchOptions ro = o_;  // this round's view: a fixed node count
    ro.nnodes = ro.min_nnodes = nodes;
    ro.node_rank = round.node_rank;
    const std::string key = rendezvous::round_job_key(setup_.job_key, round.round);
    rdzv_.set_job_key(key);
    workers::AttemptConfig config = round_config(ro, round.round, key);
    previous_ = round;
    next_round_ = round.round + 1;
    switch (meet_round_nodes(ro, round.round)) {
      case RoundStart::kStarted:
        break;
      case RoundStart::kFailed:
        return std::nullopt;
      case RoundStart::kInterrupted:
        return 128 + pending_;
    }
    std::optional<rendezvous::LauncherHeartbeat> heartbeat;
    if (ro.nnodes > 1) heartbeat.emplace(o_.master_addr, rdzv_.port(), key, ro.node_rank);
    auto newcomer = std::make_shared<std::atomic<bool>>(false);
    std::optional<rendezvous::StorePoller> watch;
    if (nodes < o_.nnodes) {
      watch_for_newcomers(round, newcomer, watch);
      config.membership_changed = [newcomer] { return newcomer->load(); };
    }
    const workers::AttemptResult result = workers::run_attempt(config);
    watch.reset();
    elastic_.end_round(round.round);  // the next round may close
    return after_attempt(result, ro, round, config, *newcomer);
  }

  workers::AttemptConfig round_config(const LaunchOptions& ro, int round,
                                      const std::string& key) const {
    workers::AttemptConfig config = workers::attempt_config(ro, rdzv_.port(), setup_.host, setup_.error_dir,
                                                            setup_.base_env, key);
    config.attempt = round;
    return config;
  }

  // Every node of the round names itself under the round's key (for the
  // failure watch and the exit barrier) and waits for the others.
  RoundStart meet_round_nodes(const LaunchOptions& ro, int round) {
    try {
      if (!rdzv_.join(ro.node_rank, ro.nnodes, setup_.host, o_.rendezvous_timeout,
                      [this] { return interrupted(); })) {
        output::say(fmt::format("received {} during the rendezvous; exiting",
                                workers::signal_name(pending_)));
        // The round's other nodes stop waiting for this one at once.
        rdzv_.close(ro.node_rank, setup_.host,
                    fmt::format("it received {}", workers::signal_name(pending_)), false, round);
        elastic_.end_round(round);
        return RoundStart::kInterrupted;
      }
    } catch (const RendezvousError& e) {
      output::say(fmt::format("rendezvous round {} could not start: {}; joining the next round",
                              round, e.what()));
      elastic_.end_round(round);
      return RoundStart::kFailed;
    }
    return RoundStart::kStarted;
  }

  // A round with fewer than MAX nodes: sets `newcomer` when a node not in it
  // waits to join.
  void watch_for_newcomers(const rendezvous::ElasticRound& round,
                           const std::shared_ptr<std::atomic<bool>>& newcomer,
                           std::optional<rendezvous::StorePoller>& watch) const {
    std::vector<int> ids;
    for (const rendezvous::ElasticMember& m : round.members) ids.push_back(m.id);
    watch.emplace(
        o_.master_addr, rdzv_.port(), kNewcomerPoll,
        [newcomer, job_key = setup_.job_key, next = next_round_, ids](c10d::TCPStore& store) {
          if (rendezvous::newcomer_waiting(store, job_key, next, ids)) *newcomer = true;
        });
  }

  // After the round's attempt: the exit code, or nullopt for the next round.
  std::optional<int> after_attempt(const workers::AttemptResult& result, const LaunchOptions& ro,
                                   const rendezvous::ElasticRound& round,
                                   const workers::AttemptConfig& config, bool newcomer) {
    const int nodes = static_cast<int>(round.members.size());
    switch (result.outcome) {
      case workers::AttemptResult::Outcome::kSucceeded: {
        const int code = rendezvous::exit_barrier(ro, setup_.host_store, kExitOk, config, rdzv_);
        elastic_.end_job(
            ended(code == kExitOk, fmt::format("round {} ({} nodes) {}", round.round, nodes,
                                               code == kExitOk ? "succeeded" : "failed")));
        return code;
      }
      case workers::AttemptResult::Outcome::kSignaled: {
        const int code = workers::signaled_exit_code(result);
        // The other nodes of the round stop too, name this one, and go on
        // without it in the next round.
        rdzv_.close(ro.node_rank, setup_.host,
                    fmt::format("it received {}", workers::signal_name(result.signal)), false,
                    round.round);
        return code;
      }
      case workers::AttemptResult::Outcome::kMembershipChanged:
        return std::nullopt;
      case workers::AttemptResult::Outcome::kFailed:
        return after_failure(*result.failure, ro, round.round, config, newcomer);
    }
    return std::nullopt;
  }

  // A failed round: a new round (a node waits to join, or a restart is
  // left), else the summary and the end of the job.
  std::optional<int> after_failure(const workers::FailureReport& failure, const LaunchOptions& ro,
                                   int round, const workers::AttemptConfig& config, bool newcomer) {
    if (newcomer) {
      output::say(
          fmt::format("round {} ended ({}) while a node waited to join; a new round (not "
                      "counted as a restart)",
                      round, workers::one_line_cause(failure)));
      return std::nullopt;
    }
    if (workers::restart_after(failure, fmt::format("round {}", round), restarts_,
                               o_.max_restarts, " in a new rendezvous round")) {
      ++restarts_;
      return std::nullopt;
    }
    rdzv_.close(ro.node_rank, setup_.host,
                fmt::format("it gave up ({} restarts allowed)", o_.max_restarts), false, round);
    elastic_.end_job(
        ended(false, fmt::format("round {} failed: {}", round, workers::one_line_cause(failure))));
    return rendezvous::exit_barrier(ro, setup_.host_store, kExitWorkerFailed, config, rdzv_);
  }

  const LaunchOptions& o_;
  const ElasticSetup setup_;
  rendezvous::NodeRendezvous& rdzv_;
  rendezvous::ElasticRendezvous elastic_;
  const rendezvous::ElasticMember me_;
  int pending_ = 0;   // the signal that interrupted a rendezvous
  int restarts_ = 0;  // failed rounds restarted so far (--max-restarts)
  int next_round_ = 0;
  std::optional<rendezvous::ElasticRound> previous_;
};

}  // namespace

int run_elastic(const LaunchOptions& o, ElasticSetup setup, rendezvous::NodeRendezvous& rdzv) {
  return ElasticAgent(o, std::move(setup), rdzv).run();
}

}  // namespace rankwise::launch
