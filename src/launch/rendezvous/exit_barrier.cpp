#include "launch/rendezvous/exit_barrier.h"

#include <fmt/format.h>

#include "wire/collective_progress.h"
#include "launch/output/say.h"
#include "launch/workers/signals.h"
#include "launch/workers/summary.h"

namespace rankwise::launch::rendezvous {

int exit_barrier(const LaunchOptions& o, bool host_store, int code, const workers::AttemptConfig& config,
                 NodeRendezvous& rdzv) {
  auto wait = code == kExitOk ? o.rendezvous_timeout : std::chrono::milliseconds(0);
  if (code != kExitOk && host_store) wait = o.grace_period + std::chrono::seconds(10);
  const int expected = o.nnodes - static_cast<int>(config.gone_nodes.size());
  const auto still_waiting = [&o, wait, expected, host_store, ok = code == kExitOk](int finished) {
    output::say(fmt::format("{}waiting up to {} s for the other nodes to finish ({} of {} have; "
                    "Ctrl-C to stop waiting{}){}",
                    ok ? "this node's workers succeeded; " : "", wait.count() / 1000.0,
                    finished, expected,
                    host_store ? ", which ends the job on every node: this node hosts its store"
                               : "",
                    ok ? "" : ": they read this failure from the store this node hosts"));
  };
  int leave_signal = 0;
  const auto failure = rdzv.leave(
      o.node_rank, o.nnodes, wait, [&] { return (leave_signal = workers::drain_stop_signal()) != 0; },
      code == kExitOk ? rankwise::wire::attempt_prefix(config.attempt, config.job_key) : "",
      still_waiting, config.gone_nodes);
  if (leave_signal != 0) {
    // As at any other time: say so, in the store too, and exit 128+n.
    output::say(fmt::format("received {} while waiting for the other nodes to finish; exiting",
                    workers::signal_name(leave_signal)));
    rdzv.close(o.node_rank, config.host,
               fmt::format("it received {} while waiting for the other nodes to finish", workers::signal_name(leave_signal)),
               false, config.attempt);
    return 128 + leave_signal;
  }
  if (code == kExitOk && failure) {
    output::say(fmt::format("this node's workers succeeded, but the job failed: {}{}; exit code 1",
                    failure->left ? "" : fmt::format("node {} failed: ", failure->node_rank),
                    failure->root_cause));
    return kExitWorkerFailed;
  }
  return code;
}

}  // namespace rankwise::launch::rendezvous
