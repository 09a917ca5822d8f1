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
#include "launch/output/output_merger.h"
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
    text += (text.empty() ? "" : ", ") + rendezvous::describe_member(static_cast<int>(n), m);
  }
  return text;
}

}  // namespace

int run_elastic(const LaunchOptions& o, ElasticSetup setup, rendezvous::NodeRendezvous& rdzv) {
  const rendezvous::ElasticLimits limits{o.min_nnodes, o.nnodes, o.rendezvous_timeout, o.last_call_timeout};
  const std::string job_key = setup.job_key;
  rendezvous::ElasticRendezvous elastic(rdzv.store(), fmt::format("{}:{}", o.master_addr, rdzv.port()),
                            job_key, limits);
  const rendezvous::ElasticMember me{elastic.take_member_id(setup.host_store, setup.store_timeout),
                         setup.host, static_cast<int>(::getpid())};
  int pending = 0;
  const auto interrupted = [&] { return (pending = workers::drain_stop_signal()) != 0; };
  int restarts = 0;  // failed rounds restarted so far (--max-restarts)
  int next_round = 0;
  std::optional<rendezvous::ElasticRound> previous;
  for (;;) {
    std::optional<rendezvous::ElasticRound> round;
    try {
      round = elastic.join(next_round, me, interrupted);
    } catch (const rendezvous::ElasticJobEnded& e) {
      const auto j = nlohmann::json::parse(e.what(), nullptr, false);
      const bool ok = j.is_object() && j.value("succeeded", false);
      output::say(fmt::format("the job ended before this node was let in: {}",
                      j.is_object() ? j.value("reason", std::string(e.what())) : e.what()));
      return ok ? kExitOk : kExitWorkerFailed;
    }
    if (!round) {
      output::say(fmt::format("received {} during the rendezvous; exiting", workers::signal_name(pending)));
      return 128 + pending;
    }
    const int nodes = static_cast<int>(round->members.size());
    const std::string left = previous ? who_left(*previous, *round) : "";
    output::say(fmt::format("rendezvous round {}: {} node{} ({}), world size {}; this is node {}{}",
                    round->round, nodes, nodes == 1 ? "" : "s", rendezvous::describe_members(round->members),
                    nodes * o.nproc_per_node, round->node_rank,
                    left.empty() ? "" : fmt::format("; left since round {}: {}",
                                                    previous->round, left)));
    LaunchOptions ro = o;  // this round's view: a fixed node count
    ro.nnodes = ro.min_nnodes = nodes;
    ro.node_rank = round->node_rank;
    const std::string key = rendezvous::round_job_key(job_key, round->round);
    rdzv.set_job_key(key);
    workers::AttemptConfig config;
    config.options = &ro;
    config.attempt = round->round;
    config.master_port = rdzv.port();
    config.host = setup.host;
    config.error_dir = setup.error_dir;
    config.base_env = setup.base_env;
    config.hang_check = o.hang_timeout.count() > 0 && ro.world_size() > 1;
    config.job_key = key;
    previous = round;
    next_round = round->round + 1;
    // Every node of the round names itself under the round's key (for the
    // failure watch and the exit barrier) and waits for the others.
    try {
      if (!rdzv.join(ro.node_rank, ro.nnodes, setup.host, o.rendezvous_timeout, interrupted)) {
        output::say(fmt::format("received {} during the rendezvous; exiting", workers::signal_name(pending)));
        // The round's other nodes stop waiting for this one at once.
        rdzv.close(ro.node_rank, setup.host, fmt::format("it received {}", workers::signal_name(pending)), false,
                   round->round);
        elastic.end_round(round->round);
        return 128 + pending;
      }
    } catch (const RendezvousError& e) {
      output::say(fmt::format("rendezvous round {} could not start: {}; joining the next round",
                      round->round, e.what()));
      elastic.end_round(round->round);
      continue;
    }
    std::optional<rendezvous::LauncherHeartbeat> heartbeat;
    if (ro.nnodes > 1) heartbeat.emplace(o.master_addr, rdzv.port(), key, ro.node_rank);
    auto newcomer = std::make_shared<std::atomic<bool>>(false);
    std::optional<rendezvous::StorePoller> watch;
    if (nodes < o.nnodes) {
      std::vector<int> ids;
      for (const rendezvous::ElasticMember& m : round->members) ids.push_back(m.id);
      watch.emplace(o.master_addr, rdzv.port(), kNewcomerPoll,
                    [newcomer, job_key, next = next_round, ids](c10d::TCPStore& store) {
                      if (rendezvous::newcomer_waiting(store, job_key, next, ids)) *newcomer = true;
                    });
      config.membership_changed = [newcomer] { return newcomer->load(); };
    }
    const workers::AttemptResult result = workers::run_attempt(config);
    watch.reset();
    elastic.end_round(round->round);  // the next round may close
    switch (result.outcome) {
      case workers::AttemptResult::Outcome::kSucceeded: {
        const int code = rendezvous::exit_barrier(ro, setup.host_store, kExitOk, config, rdzv);
        elastic.end_job(ended(code == kExitOk,
                              fmt::format("round {} ({} nodes) {}", round->round, nodes,
                                          code == kExitOk ? "succeeded" : "failed")));
        return code;
      }
      case workers::AttemptResult::Outcome::kSignaled:
        output::say(fmt::format("stopped every worker after {}; exit code {}", workers::signal_name(result.signal),
                        128 + result.signal));
        // The other nodes of the round stop too, name this one, and go on
        // without it in the next round.
        rdzv.close(ro.node_rank, setup.host, fmt::format("it received {}", workers::signal_name(result.signal)), false,
                   round->round);
        return 128 + result.signal;
      case workers::AttemptResult::Outcome::kMembershipChanged:
        continue;
      case workers::AttemptResult::Outcome::kFailed:
        if (*newcomer) {
          output::say(fmt::format("round {} ended ({}) while a node waited to join; a new round (not "
                          "counted as a restart)",
                          round->round, workers::one_line_cause(*result.failure)));
          continue;
        }
        if (restarts < o.max_restarts) {
          ++restarts;
          output::say(fmt::format("round {} failed ({}); restarting in a new rendezvous round ({}/{})",
                          round->round, workers::one_line_cause(*result.failure), restarts,
                          o.max_restarts));
          continue;
        }
        output::write_all(2, workers::format_failure_summary(*result.failure));
        if (o.max_restarts > 0) output::say(fmt::format("giving up after {} restarts", o.max_restarts));
        rdzv.close(ro.node_rank, setup.host, fmt::format("it gave up ({} restarts allowed)", o.max_restarts),
                   false, round->round);
        elastic.end_job(ended(false, fmt::format("round {} failed: {}", round->round,
                                                 workers::one_line_cause(*result.failure))));
        return rendezvous::exit_barrier(ro, setup.host_store, kExitWorkerFailed, config, rdzv);
    }
  }
}

}  // namespace rankwise::launch
