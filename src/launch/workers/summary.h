#pragma once
/// \file summary.h
/// What happened to each worker, and the failure summary printed on stderr.

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "wire/error_file.h"
#include "launch/rendezvous/group_failure.h"

namespace rankwise::launch::workers {

/// Life cycle of a worker.
enum class WorkerState {
  kRunning,
  kSucceeded,   ///< exited with code 0
  kFailed,      ///< exited non-zero or by a signal the launcher did not send
  kTerminated,  ///< ended after the launcher asked it to stop
};

/// One worker of one attempt.
struct WorkerRecord {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  WorkerState state = WorkerState::kRunning;
  int exit_code = -1;   ///< valid when it exited normally
  int term_signal = 0;  ///< signal that ended it, 0 when it exited
  bool stop_requested = false;  ///< the launcher sent it SIGTERM/SIGKILL/forwarded a signal
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
  std::chrono::steady_clock::time_point stop_time;  ///< when the launcher first asked it to stop
  /// It was stopped (SIGSTOP, a debugger: state T in /proc) when the launcher
  /// first asked it to stop; the summary says so.
  bool was_stopped = false;
  /// Set when the launcher's hang check (--hang-timeout) stopped the job:
  /// "held the others up in a hang" or "was in a deadlock with every other
  /// rank"; "" otherwise.
  std::string hang_role;
  /// Set when it is the root cause for ending with exit code 0 while the
  /// others still needed it (pick_early_exit, root_cause.h): what it did and
  /// what they were doing (describe_early_exit); "" otherwise.
  std::string left_early;
  /// Killed by SIGKILL, not from the launcher, while the kernel's count of
  /// out-of-memory kills rose (cgroup_oom_kills()): the summary says so.
  bool out_of_memory = false;
  std::string error_file;  ///< its RANKWISE_ERROR_FILE
  std::optional<wire::WorkerError> error;  ///< what it wrote there, read when the attempt ended
};

/// "SIGKILL" for 9 and so on; "signal N" when unknown.
std::string signal_name(int sig);

/// "exited with code 3" or "was killed by SIGKILL (signal 9)".
std::string describe_exit(const WorkerRecord& w);

/// How a root cause ended: describe_exit, or for a worker the launcher
/// stopped after it had reported an error "reported an error, then was
/// stopped by the launcher (SIGTERM)", or for one that held the others up in
/// a hang "held the others up in a hang (it was stopped: SIGSTOP or a
/// debugger), then was stopped by the launcher (SIGTERM)", or for one that
/// left early its `left_early`.
std::string describe_root_cause(const WorkerRecord& w);

/// "rank 3 (local rank 1) on host n1 (node 1) " + describe_root_cause(w):
/// the summary's root cause line, which a multi-node job's other launchers
/// repeat (NodeFailure::root_cause).
std::string root_cause_headline(const WorkerRecord& w, const std::string& host, int node_rank);

/// The error file of rank `rank` in attempt `attempt` under --log-dir
/// `log_dir`: DIR/attempt_N/error_rankR.json, kept after the launcher exits.
std::string kept_error_file(const std::string& log_dir, int attempt, int rank);

/// Everything the summary shows.
struct FailureReport {
  int attempt = 0;
  std::string host;
  int node_rank = 0;
  int world_size = 1;
  WorkerRecord root_cause;                 ///< see pick_root_cause (root_cause.h)
  std::deque<std::string> root_stderr_tail;  ///< its last stderr lines
  std::vector<WorkerRecord> workers;       ///< every local worker
  std::chrono::steady_clock::time_point job_start;
  /// The error files are in --log-dir (kept_error_file), which outlives the
  /// launcher; otherwise in its temporary directory, removed when it exits.
  bool error_files_kept = false;
  /// When the launcher ended a hang (--hang-timeout): who held the others up.
  std::string hang;
  /// Multi-node: the job's first failure was on another node, whose launcher
  /// published it (group_failure.h); this node stopped its workers for it.
  /// `root_cause` is then unused.
  std::optional<rendezvous::NodeFailure> remote;
};

/// Multi-line summary naming the root cause (rank, local rank, host, pid,
/// exit code or signal, elapsed time, its error message once, its error file
/// and when the error happened, its stderr tail without run_main's line that
/// repeats the message) and the fate of the other local workers. With
/// `remote`, the other node's root cause line and error, and the fate of
/// every local worker. Ends with a newline.
std::string format_failure_summary(const FailureReport& report);

/// The root cause in one line, for "attempt 0 failed (...); restarting":
/// the other node's when it failed first, else "rank R <what happened>".
std::string one_line_cause(const FailureReport& report);

/// After the failed `attempt` ("attempt 0", "round 2"): true when a restart
/// is left (`restarts` of `max_restarts` used), after "ATTEMPT failed (CAUSE);
/// restarting (i/K)HOW" on stderr; else false, after the failure summary and
/// "giving up after K restarts".
bool restart_after(const FailureReport& failure, const std::string& attempt, int restarts,
                   int max_restarts, const std::string& how = "");

}  // namespace rankwise::launch::workers
