#pragma once
/// \file worker_group.h
/// One attempt: start the local workers, merge their output, watch them, and
/// stop them all when one fails or the launcher gets a signal (run_attempt(),
/// which runs an AttemptRunner: attempt_runner.h).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launch/options.h"
#include "launch/workers/summary.h"

namespace rankwise::launch::workers {

/// Inputs of one attempt.
struct AttemptConfig {
  const LaunchOptions* options = nullptr;
  int attempt = 0;           ///< restart count, from 0
  int master_port = 0;       ///< resolved store port
  std::string host;          ///< this node's host name
  std::string error_dir;     ///< where RANKWISE_ERROR_FILE paths live
  std::vector<std::string> base_env;  ///< launcher's env minus the variables we set
  /// Read the workers' progress from the job's store (at master_addr and
  /// master_port) and look for hangs (--hang-timeout, --deadlock-timeout).
  bool hang_check = false;
  /// The secret under which the workers keep their store keys (see
  /// job_key() in launcher.cpp); "" for none.
  std::string job_key;
  /// Multi-node: nodes whose launcher stopped answering in an attempt (its
  /// failure was NodeFailure::silent); the exit barrier does not wait for them.
  std::vector<int> gone_nodes;
  /// Elastic rounds: polled every 100 ms (it must not block); when it returns
  /// true the launcher stops every worker (SIGTERM, then SIGKILL after the
  /// grace period) for a new rendezvous round, and the attempt ends as
  /// kMembershipChanged. Empty: never.
  std::function<bool()> membership_changed;
};

/// An attempt of the job `o` describes (the whole job's options, or an
/// elastic round's view of them), its store at `master_port`, its workers'
/// keys under `job_key`; hang_check when `o` asks for one and has peers.
AttemptConfig attempt_config(const LaunchOptions& o, int master_port, std::string host,
                             std::string error_dir, std::vector<std::string> base_env,
                             std::string job_key);

/// How an attempt ended.
struct AttemptResult {
  /// kMembershipChanged: stopped for a new rendezvous round (membership_changed).
  enum class Outcome { kSucceeded, kFailed, kSignaled, kMembershipChanged };
  Outcome outcome = Outcome::kSucceeded;
  int signal = 0;                        ///< with kSignaled: the launcher's signal
  /// With kSignaled: every worker saved and exited wire::kPreemptedExitCode.
  bool preempted = false;
  /// With kFailed; with kSignaled when a worker reported an error after the
  /// signal (a preemption's save that failed).
  std::optional<FailureReport> failure;
};

/// After kSignaled: says how the workers ended (the failure summary first,
/// when there is one) and returns the launcher's exit code,
/// wire::kPreemptedExitCode when `result.preempted`, else 128+signal.
int signaled_exit_code(const AttemptResult& result);

/// Runs one attempt to its end. Throws std::system_error when a worker cannot
/// be started (pipe/fork), after stopping the ones already running.
AttemptResult run_attempt(const AttemptConfig& config);

/// The environment of the worker with `local_rank` (exposed for tests).
std::vector<std::string> worker_environment(const AttemptConfig& config, int local_rank);

/// Where the worker with `rank` writes its error (RANKWISE_ERROR_FILE) and
/// its stack dumps (RANKWISE_STACK_DUMP_FILE) in this attempt: files in the
/// launcher's temporary directory, but the error file in --log-dir when
/// given (kept_error_file), so that it outlives the launcher.
std::string worker_error_file(const AttemptConfig& config, int rank);
std::string worker_stack_dump_file(const AttemptConfig& config, int rank);

/// Sets NAME=value in `env`, replacing every entry of that name.
void set_environment_variable(std::vector<std::string>& env, const std::string& name,
                              const std::string& value);

}  // namespace rankwise::launch::workers
