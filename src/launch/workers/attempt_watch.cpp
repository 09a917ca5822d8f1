// Watching an attempt through the job's store: the hang check
// (--hang-timeout) with its report and stack dumps, and --monitor.
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "launch/watch/collective_mismatch.h"
#include "launch/workers/attempt_runner.h"
#include "launch/workers/stack_dumps.h"
#include "launch/workers/worker_process.h"
#include "util/text.h"

namespace rankwise::launch::workers {

// A quarter of the shorter of --hang-timeout and --deadlock-timeout (those
// on), between 0.1 and 1 s.
std::chrono::milliseconds AttemptRunner::hang_check_interval() const {
  std::chrono::milliseconds shortest = std::chrono::milliseconds::max();
  for (const auto t : {o_.hang_timeout, o_.deadlock_timeout}) {
    if (t.count() > 0) shortest = std::min(shortest, t);
  }
  return std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(100),
                                               std::chrono::milliseconds(1000));
}

bool AttemptRunner::hang_check_due() const {
  return watchdog_ && !failed_ && !stopping_ && !killed_ && signal_ == 0 && !report_deadline_;
}

const WorkerRecord* AttemptRunner::local_worker(int rank) const {
  const int local = rank - o_.node_rank * o_.nproc_per_node;
  if (local < 0 || static_cast<std::size_t>(local) >= workers_.size()) return nullptr;
  return &workers_[static_cast<std::size_t>(local)];
}

// The process of worker `w` that published `v`'s record: the worker itself,
// or one in its process group (the worker may be a wrapper such as
// `sh -c 'train; echo done'`); -1 when neither.
pid_t AttemptRunner::rankwise_process(const WorkerRecord& w, const watch::RankView& v) {
  if (!v.progress || v.progress->pid <= 0) return -1;
  const pid_t pid = static_cast<pid_t>(v.progress->pid);
  if (pid == w.pid || ::getpgid(pid) == w.pid) return pid;
  return -1;
}

// What the store (`records`, index = rank) and this node's processes say
// about every rank.
std::vector<watch::RankView> AttemptRunner::observe_ranks(
    const std::vector<std::optional<wire::CollectiveProgress>>& records) {
  std::vector<watch::RankView> views;
  for (int r = 0; r < o_.world_size(); ++r) {
    watch::RankView v;
    v.rank = r;
    if (static_cast<std::size_t>(r) < records.size()) {
      v.progress = records[static_cast<std::size_t>(r)];
    }
    if (const WorkerRecord* w = local_worker(r)) {
      v.local = true;
      v.ended = w->state != WorkerState::kRunning;
      const pid_t rankwise_pid = rankwise_process(*w, v);
      v.stopped =
          !v.ended && (is_stopped(w->pid) || (rankwise_pid > 0 && is_stopped(rankwise_pid)));
    }
    views.push_back(std::move(v));
  }
  return views;
}

void AttemptRunner::start_monitor() {
  watch::MonitorOptions mo;
  mo.fd = 2;
  mo.terminal = ::isatty(mo.fd) == 1;
  mo.refresh = *o_.monitor;
  mo.straggler_threshold = o_.straggler_threshold;
  mo.straggler_window = o_.straggler_window;
  mo.write = [this](int fd, std::string_view text) { merger_->write_own(fd, text); };
  monitor_.emplace(mo, job_start_);
  next_monitor_ = job_start_ + kMonitorTick;
}

bool AttemptRunner::monitor_due() const {
  return monitor_ && !stopping_ && !killed_ && signal_ == 0;
}

// --monitor: the latest heartbeats, straggler and stall lines, the table.
// A due table shows a read of the store that began once it was due, so that
// it has every step published by then.
void AttemptRunner::tick_monitor() {
  const Clock::time_point now = Clock::now();
  next_monitor_ = now + kMonitorTick;
  watch::CollectiveProgressReader::Snapshot snapshot = reader_->latest();
  if (monitor_->table_due(now)) {
    if (!table_read_) {
      table_read_ = reader_->request_read();
      table_read_deadline_ = now + kTableReadWait;
    }
    if (snapshot.served < *table_read_ && now < table_read_deadline_) {
      next_monitor_ = now + kTableReadPoll;
      return;
    }
    table_read_.reset();
  }
  monitor_->observe(observe_ranks(snapshot.records), now);
}

void AttemptRunner::check_hang() {
  next_hang_check_ = Clock::now() + hang_check_interval();
  // Only a new complete read of the store counts: while the store does not
  // answer (a stuck client on libtorch 1.13), nothing is concluded.
  watch::CollectiveProgressReader::Snapshot snapshot = reader_->latest();
  if (snapshot.generation == last_generation_) return;
  last_generation_ = snapshot.generation;
  std::vector<watch::RankView> views = observe_ranks(snapshot.records);
  if (!watchdog_->observe(views, Clock::now())) return;
  const std::optional<watch::CollectiveMismatch> mismatch =
      watchdog_->mismatched() ? watch::find_mismatch(views) : std::nullopt;
  std::string report =
      mismatch ? watch::format_mismatch_report(views, *mismatch, wire::unix_ms_now(),
                                               o_.deadlock_timeout)
               : watch::format_hang_report(views, wire::unix_ms_now(), o_.hang_timeout);
  say(report);
  report += dump_stacks(views);
  if (!o_.log_dir.empty()) {  // the evidence, beside the logs
    std::ofstream(fmt::format("{}/attempt_{}/hang_report.txt", o_.log_dir, c_.attempt)) << report;
  }
  hang_ranks_ = mismatch ? mismatch->alone : watch::ranks_holding_up(views);
  if (mismatch) {
    hang_ = fmt::format("a deadlock: {}", watch::describe_mismatch(views, *mismatch));
    hang_role_ = "entered a collective alone in a deadlock (see the report above)";
  } else {
    hang_ = watch::is_deadlock(hang_ranks_, o_.world_size())
                ? "every rank waited in a collective no other rank completed (a deadlock)"
                : fmt::format("{} held the others up", util::rank_list(hang_ranks_));
  }
  failed_ = true;
  stop_for_local_failure();
}

// Asks every local worker that can (running, not stopped, its handler
// installed) for its threads' stacks, prints them and returns what it printed.
std::string AttemptRunner::dump_stacks(const std::vector<watch::RankView>& views) {
  std::vector<StackDumpTarget> targets;
  for (const watch::RankView& v : views) {
    if (!v.local || v.ended || v.stopped || !v.progress || !v.progress->stack_dump) continue;
    // Only the process that installed the handler gets the signal.
    const pid_t pid = rankwise_process(*local_worker(v.rank), v);
    if (pid <= 0) continue;
    targets.push_back({v.rank, pid, worker_stack_dump_file(c_, v.rank)});
  }
  const std::string printed = request_stack_dumps(targets, kStackDumpWait);
  say(printed);
  return printed;
}

}  // namespace rankwise::launch::workers
