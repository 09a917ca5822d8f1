#pragma once
/// \file attempt_runner.h
/// One attempt of this node's workers, as run_attempt() runs it: spawn them
/// (attempt_spawn.cpp), poll their pipes and the signal pipe
/// (attempt_runner.cpp), reap and stop them (attempt_stopping.cpp), watch
/// for hangs and feed --monitor (attempt_watch.cpp, stack_dumps.h), and
/// build the failure report, on several nodes with the other launchers
/// (attempt_failure.cpp).

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launch/options.h"
#include "launch/output/output_merger.h"
#include "launch/rendezvous/group_failure.h"
#include "launch/watch/collective_progress_reader.h"
#include "launch/watch/hang_watchdog.h"
#include "launch/watch/run_monitor.h"
#include "launch/workers/summary.h"
#include "launch/workers/worker_group.h"
#include "wire/collective_progress.h"

namespace rankwise::launch::workers {

/// How long the launcher waits, after a first failure whose error only says
/// that a peer is gone, for the rank that caused it to report or fail before
/// it stops the others (that rank may still be unwinding: destructors).
constexpr std::chrono::milliseconds kReportWindow{5000};
/// How often it looks for their error files meanwhile.
constexpr std::chrono::milliseconds kReportPoll{50};
/// How long the failure report waits for a read of the store that has the
/// workers' last progress records (to describe a rank that left early).
constexpr std::chrono::milliseconds kFinalRecordsWait{2500};
/// How long a hang report waits for the workers' stack dumps.
constexpr std::chrono::milliseconds kStackDumpWait{3000};
/// Multi-node: how often the launcher looks for another node's failure, and
/// how long it waits for the store to take or give a failure's details.
constexpr std::chrono::milliseconds kGroupPoll{250};
constexpr std::chrono::milliseconds kGroupWait{2000};
/// --monitor: how often the launcher reads the heartbeats and looks for
/// stragglers and stalled ranks (the table has its own refresh interval).
constexpr std::chrono::milliseconds kMonitorTick{500};
/// --monitor: a due table waits at most this long for a read of the store
/// that began after it was due (else it shows the latest read), looking
/// every kTableReadPoll; the last table waits kFinalRead for the workers'
/// last heartbeats.
constexpr std::chrono::milliseconds kTableReadWait{500};
constexpr std::chrono::milliseconds kTableReadPoll{20};
constexpr std::chrono::milliseconds kFinalRead{2000};

/// One attempt, from spawning the workers to their summary. Used once.
class AttemptRunner {
 public:
  using Clock = std::chrono::steady_clock;

  explicit AttemptRunner(const AttemptConfig& c) : c_(c), o_(*c.options) {}

  /// Runs the attempt to its end (see run_attempt()).
  AttemptResult run();

 private:
  /// One pipe of a worker: its read end, or -1 once closed.
  struct Pipe {
    int fd = -1;
    std::size_t worker = 0;
    output::Stream stream = output::Stream::kStdout;
  };

  // attempt_spawn.cpp: the output merger (tags, log files) and the workers.
  void open_output();
  void start_watches();
  void spawn_workers();

  // attempt_runner.cpp: the poll loop over the signal pipe and every pipe.
  void loop();
  std::chrono::milliseconds poll_timeout() const;
  void poll_pipes(std::chrono::milliseconds timeout);
  void run_checks();
  void read_pipe(Pipe& p);
  void close_pipe(Pipe& p);
  void close_logs();
  AttemptResult result();
  // The launcher's own lines during an attempt, to stderr: between the
  // workers' lines, never on the end of an in-place progress line.
  void say(std::string_view text);

  // attempt_stopping.cpp: reaping, failures, signals, stopping.
  bool any_running() const;
  // Signals every running worker: the launcher's own stop, or with
  // `forwarded` a signal the launcher received (a SIGTERM then lets a Fabric
  // run save: wire/preemption.h). SIGKILL follows after the grace period.
  void stop_all(int sig, bool forwarded = false);
  void reap();
  void on_failure(const WorkerRecord& w);
  // Whether a worker (with `running_only`, a running one) wrote its error file.
  bool worker_reported(bool running_only) const;
  void on_signal(int sig);
  void check_membership();

  // attempt_watch.cpp: the hang check (--hang-timeout) and --monitor.
  std::chrono::milliseconds hang_check_interval() const;
  bool hang_check_due() const;
  const WorkerRecord* local_worker(int rank) const;
  static pid_t rankwise_process(const WorkerRecord& w, const watch::RankView& v);
  std::vector<watch::RankView> observe_ranks(
      const std::vector<std::optional<wire::CollectiveProgress>>& records);
  void start_monitor();
  bool monitor_due() const;
  void tick_monitor();
  void check_hang();
  std::string dump_stacks(const std::vector<watch::RankView>& views);

  // attempt_failure.cpp: the failure report; several nodes' failures.
  FailureReport failure_report();
  std::vector<std::optional<wire::CollectiveProgress>> last_records();
  rendezvous::NodeFailure node_failure(const FailureReport& r) const;
  void stop_for_local_failure();
  void check_group();
  std::optional<rendezvous::NodeFailure> wait_for_group(
      const std::function<bool(const std::optional<rendezvous::NodeFailure>&)>& done,
      std::chrono::milliseconds timeout);
  void settle_group_failure(FailureReport& r);

  const AttemptConfig& c_;
  const LaunchOptions& o_;
  std::optional<output::OutputMerger> merger_;
  std::vector<std::pair<int, int>> log_fds_;
  std::vector<WorkerRecord> workers_;
  // The kernel's out-of-memory kills when the workers started (cgroup_oom_kills()).
  std::optional<int64_t> oom_kills_at_start_;
  std::vector<Pipe> pipes_;
  bool failed_ = false;              // a worker failed (not stopped by the launcher)
  bool membership_changed_ = false;  // stopped for a new round (check_membership)
  std::optional<Clock::time_point> report_deadline_;  // see on_failure
  int signal_ = 0;
  bool stopping_ = false;
  bool killed_ = false;
  bool all_reaped_ = false;
  Clock::time_point kill_deadline_;
  Clock::time_point drain_deadline_;
  Clock::time_point job_start_;
  // With --hang-timeout (several ranks) or --monitor.
  std::optional<watch::CollectiveProgressReader> reader_;
  uint64_t last_generation_ = 0;  // of the last snapshot observed
  std::optional<watch::HangWatchdog> watchdog_;
  std::optional<watch::RunMonitor> monitor_;  // with --monitor
  Clock::time_point next_monitor_;
  // A due table's read of the store (CollectiveProgressReader::request_read)
  // and until when it waits for it.
  std::optional<uint64_t> table_read_;
  Clock::time_point table_read_deadline_;
  Clock::time_point next_hang_check_;
  std::vector<int> hang_ranks_;  // after a hang: the ranks that held the others up
  std::string hang_;             // ... and the summary's line about it
  std::string hang_role_;        // ... and their role in it ("" : see failure_report)
  std::optional<rendezvous::GroupFailureWatch> group_;  // multi-node
  std::optional<rendezvous::NodeFailure> remote_;       // another node failed first (check_group)
};

}  // namespace rankwise::launch::workers
