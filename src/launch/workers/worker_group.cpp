#include "launch/workers/worker_group.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "launch/output/console_streams.h"
#include "launch/workers/cpu_sched.h"
#include "util/text.h"
#include "wire/collective_progress.h"
#include "wire/stack_dump_request.h"
#include "wire/error_file.h"
#include "launch/rendezvous/group_failure.h"
#include "launch/watch/hang_watchdog.h"
#include "launch/output/output_merger.h"
#include "launch/watch/collective_progress_reader.h"
#include "launch/workers/root_cause.h"
#include "launch/watch/run_monitor.h"
#include "launch/workers/signals.h"
#include "launch/output/tag_template.h"
#include "launch/workers/worker_process.h"

namespace rankwise::launch::workers {

using Clock = std::chrono::steady_clock;

// How long the launcher waits, after a first failure whose error only says
// that a peer is gone, for the rank that caused it to report or fail before
// it stops the others (that rank may still be unwinding: destructors).
constexpr std::chrono::milliseconds kReportWindow{5000};
// How often it looks for their error files meanwhile.
constexpr std::chrono::milliseconds kReportPoll{50};
// How long a hang report waits for the workers' stack dumps.
constexpr std::chrono::milliseconds kStackDumpWait{3000};
// Multi-node: how often the launcher looks for another node's failure, and
// how long it waits for the store to take or give a failure's details.
constexpr std::chrono::milliseconds kGroupPoll{250};
constexpr std::chrono::milliseconds kGroupWait{2000};
// --monitor: how often the launcher reads the heartbeats and looks for
// stragglers and stalled ranks (the table has its own refresh interval).
constexpr std::chrono::milliseconds kMonitorTick{500};

namespace {
// Files in the launcher's temporary directory, per attempt and rank.
std::string error_file(const AttemptConfig& c, int rank) {
  return fmt::format("{}/error_attempt{}_rank{}.json", c.error_dir, c.attempt, rank);
}
std::string stack_dump_file(const AttemptConfig& c, int rank) {
  return fmt::format("{}/stacks_attempt{}_rank{}.txt", c.error_dir, c.attempt, rank);
}

// Sets NAME=value in `env`, replacing an entry of that name.
void set_variable(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  env.erase(std::remove_if(env.begin(), env.end(),
                           [&](const std::string& v) { return v.rfind(name + "=", 0) == 0; }),
            env.end());
  env.push_back(name + "=" + value);
}
}  // namespace

std::vector<std::string> worker_environment(const AttemptConfig& c, int local_rank) {
  const LaunchOptions& o = *c.options;
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  std::vector<std::string> env = c.base_env;
  auto set = [&](const char* name, const std::string& value) {
    env.push_back(fmt::format("{}={}", name, value));
  };
  set("RANK", std::to_string(rank));
  set("LOCAL_RANK", std::to_string(local_rank));
  set("WORLD_SIZE", std::to_string(o.world_size()));
  set("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node));
  set("GROUP_RANK", std::to_string(o.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(o.nnodes));
  set("ROLE_RANK", std::to_string(rank));
  set("ROLE_WORLD_SIZE", std::to_string(o.world_size()));
  set("ROLE_NAME", o.role);
  set("MASTER_ADDR", o.master_addr);
  set("MASTER_PORT", std::to_string(c.master_port));
  set("RANKWISE_RESTART_COUNT", std::to_string(c.attempt));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(c.attempt));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts));
  set("TORCHELASTIC_RUN_ID", o.run_id);
  set("RANKWISE_AGENT_STORE", "1");
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  set(wire::kErrorFileVariable, error_file(c, rank));
  set(wire::kStackDumpFileVariable, stack_dump_file(c, rank));
  if (!c.job_key.empty()) set(wire::kJobKeyVariable, c.job_key);
  // A flag wins over the same variable in the launcher's own environment.
  if (!o.iface.empty()) set_variable(env, "GLOO_SOCKET_IFNAME", o.iface);
  // With --log-dir, a collective that fails dumps its rank's flight recorder
  // beside the logs (unless the user chose a directory already).
  const bool user_dir = std::any_of(env.begin(), env.end(), [](const std::string& v) {
    return v.rfind("RANKWISE_FLIGHT_RECORDER_DIR=", 0) == 0;
  });
  if (!o.log_dir.empty() && !user_dir) {
    set("RANKWISE_FLIGHT_RECORDER_DIR",
        fmt::format("{}/attempt_{}/flight_recorder", o.log_dir, c.attempt));
  }
  return env;
}

namespace {

struct Pipe {
  int fd = -1;
  std::size_t worker = 0;
  output::Stream stream = output::Stream::kStdout;
};

int open_log(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw std::system_error(errno, std::generic_category(), "cannot open log file " + path);
  }
  return fd;
}

class AttemptRunner {
 public:
  explicit AttemptRunner(const AttemptConfig& c) : c_(c), o_(*c.options) {}

  AttemptResult run() {
    const int n = o_.nproc_per_node;
    output::MergerOptions mo;
    mo.group_by_rank = o_.group_by_rank;
    mo.terminal = ::isatty(mo.stdout_fd) == 1;
    const output::TagTemplate tag = output::TagTemplate::parse(o_.tag_enabled ? o_.tag : "");
    std::string log_attempt_dir;
    if (!o_.log_dir.empty()) {
      log_attempt_dir = fmt::format("{}/attempt_{}", o_.log_dir, c_.attempt);
      std::filesystem::create_directories(log_attempt_dir);
    }
    for (int l = 0; l < n; ++l) {
      const int rank = o_.node_rank * n + l;
      mo.ranks.push_back(rank);
      mo.console.push_back(output::console_streams(o_, l, rank));
      mo.tags.push_back(tag.render({rank, l, o_.node_rank, o_.world_size(), c_.host}));
      if (!log_attempt_dir.empty()) {
        mo.log_fds.emplace_back(open_log(fmt::format("{}/rank_{}.stdout", log_attempt_dir, rank)),
                                open_log(fmt::format("{}/rank_{}.stderr", log_attempt_dir, rank)));
      }
    }
    log_fds_ = mo.log_fds;
    merger_.emplace(std::move(mo));
    job_start_ = Clock::now();
    const std::string attempt_prefix = wire::attempt_prefix(c_.attempt, c_.job_key);
    if (c_.hang_check || o_.monitor) {
      reader_.emplace(o_.master_addr, c_.master_port, attempt_prefix, o_.world_size(),
                      c_.hang_check ? hang_check_interval() : kMonitorTick);
    }
    if (c_.hang_check) {
      watchdog_.emplace(o_.hang_timeout);
      next_hang_check_ = job_start_ + hang_check_interval();
    }
    if (o_.monitor) start_monitor();
    if (o_.nnodes > 1) {
      group_.emplace(o_.master_addr, c_.master_port, attempt_prefix, c_.job_key, kGroupPoll,
                     o_.node_rank, o_.nnodes);
    }

    for (int l = 0; l < n; ++l) {
      WorkerRecord rec;
      rec.local_rank = l;
      rec.rank = o_.node_rank * n + l;
      WorkerSpec spec{o_.program, o_.program_argv, worker_environment(c_, l),
                      linux_sched_policy(o_.cpu_sched)};
      set_variable(spec.env, output::kStdoutIsTtyVariable, merger_->shows_in_place(l) ? "1" : "0");
      rec.error_file = error_file(c_, rec.rank);
      ::unlink(rec.error_file.c_str());
      SpawnedWorker sw;
      try {
        sw = spawn_worker(spec);
      } catch (...) {
        stop_all(SIGKILL);
        loop();
        close_logs();
        throw;
      }
      rec.pid = sw.pid;
      rec.start = Clock::now();
      workers_.push_back(rec);
      pipes_.push_back({sw.stdout_fd, workers_.size() - 1, output::Stream::kStdout});
      pipes_.push_back({sw.stderr_fd, workers_.size() - 1, output::Stream::kStderr});
    }

    loop();
    close_logs();
    if (monitor_) {
      const std::vector<watch::RankView> views = observe_ranks(reader_->latest().records);
      monitor_->finish(&views, Clock::now());
    }

    AttemptResult result;
    if (signal_ != 0) {
      result.outcome = AttemptResult::Outcome::kSignaled;
      result.signal = signal_;
    } else if (membership_changed_) {
      result.outcome = AttemptResult::Outcome::kMembershipChanged;
    } else if (failed_ || remote_) {
      result.outcome = AttemptResult::Outcome::kFailed;
      FailureReport r = failure_report();
      if (group_) settle_group_failure(r);
      result.failure = std::move(r);
    }
    return result;
  }

 private:
  // The attempt's failure as this node sees it (the workers' error files
  // read now): its root cause, and what happened to every local worker.
  FailureReport failure_report() {
    for (auto& w : workers_) w.error = wire::read_worker_error(w.error_file);
    std::size_t root = pick_root_cause(workers_).value_or(0);
    // A hang: the first local rank that held the others up.
    const bool deadlock = watch::is_deadlock(hang_ranks_, o_.world_size());
    for (std::size_t i = workers_.size(); i-- > 0;) {
      WorkerRecord& w = workers_[i];
      if (std::find(hang_ranks_.begin(), hang_ranks_.end(), w.rank) == hang_ranks_.end()) continue;
      w.hang_role = deadlock ? "was in a deadlock with every other rank (see the hang report)"
                             : "held the others up in a hang";
      root = i;
    }
    FailureReport r;
    r.attempt = c_.attempt;
    r.host = c_.host;
    r.node_rank = o_.node_rank;
    r.world_size = o_.world_size();
    r.root_cause = workers_[root];
    r.root_stderr_tail = merger_->stderr_tail(root);
    r.workers = workers_;
    r.job_start = job_start_;
    r.hang = hang_;
    return r;
  }

  rendezvous::NodeFailure node_failure(const FailureReport& r) const {
    rendezvous::NodeFailure f;
    f.node_rank = o_.node_rank;
    f.root_cause = root_cause_headline(r.root_cause, r.host, r.node_rank);
    if (r.root_cause.error) {
      const std::string& m = r.root_cause.error->message;
      f.error = m.substr(0, m.find('\n'));
    }
    return f;
  }

  // This node's workers failed (not for another node's failure): stops them
  // and, on a multi-node job, tells the other launchers.
  void stop_for_local_failure() {
    stop_all(SIGTERM);
    if (group_ && !remote_) group_->report(node_failure(failure_report()));
  }

  // Multi-node: another node's failure came first; stop this node's workers.
  // The launcher's own lines during an attempt, to stderr: between the
  // workers' lines, never on the end of an in-place progress line.
  void say(std::string_view text) {
    if (merger_) {
      merger_->write_own(2, text);
    } else {
      output::write_all(2, text);
    }
  }

  void check_group() {
    if (!group_ || remote_) return;
    const std::optional<rendezvous::NodeFailure> first = group_->first();
    if (!first || first->node_rank == o_.node_rank) return;
    remote_ = first;
    if (signal_ != 0 || killed_) return;
    say(first->left ? fmt::format("rankwise-run: {}; stopping this node's workers\n",
                                           first->root_cause)
                             : fmt::format("rankwise-run: node {} failed: {}; stopping this node's "
                                           "workers\n",
                                           first->node_rank, first->root_cause));
    if (!stopping_) stop_all(SIGTERM);
  }

  // Polls group_->first() until `done` holds for it, at most `timeout`.
  template <typename Done>
  std::optional<rendezvous::NodeFailure> wait_for_group(Done done, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::optional<rendezvous::NodeFailure> f = group_->first();
    while (!done(f) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      f = group_->first();
    }
    return f;
  }

  // At the end of a failed multi-node attempt: which node's failure was first
  // decides the root cause every launcher names. The first node publishes its
  // summary's root cause; the others wait for it (its workers end within its
  // grace period), else name what it published when it stopped them.
  void settle_group_failure(FailureReport& r) {
    if (!remote_) {
      group_->flush(kGroupWait);
      const auto first = wait_for_group([](const auto& f) { return f.has_value(); }, kGroupWait);
      if (first && first->node_rank != o_.node_rank) remote_ = first;
    }
    if (!remote_) {
      group_->report_final(node_failure(r));
      group_->flush(kGroupWait);
      return;
    }
    if (remote_->left) {  // a launcher that left publishes nothing more
      r.remote = remote_;
      return;
    }
    const auto final = wait_for_group([](const auto& f) { return f && f->final; },
                                      o_.grace_period + kGroupWait + kGroupWait);
    r.remote = final ? final : remote_;
  }

  bool any_running() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const WorkerRecord& w) { return w.state == WorkerState::kRunning; });
  }

  void stop_all(int sig) {
    for (auto& w : workers_) {
      if (w.state != WorkerState::kRunning) continue;
      if (!w.stop_requested) {
        w.stop_time = Clock::now();
        w.was_stopped = is_stopped(w.pid);
      }
      w.stop_requested = true;
      signal_worker_group(w.pid, sig);
      // A stopped worker (SIGSTOP) would keep SIGTERM pending: let it run
      // its handler or default action now.
      if (sig != SIGKILL) signal_worker_group(w.pid, SIGCONT);
    }
    if (sig == SIGKILL) {
      killed_ = true;
    } else if (!stopping_) {
      stopping_ = true;
      kill_deadline_ = Clock::now() + o_.grace_period;
    }
  }

  void reap() {
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      WorkerRecord& w = workers_[i];
      if (w.state != WorkerState::kRunning) continue;
      int status = 0;
      const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r != w.pid) continue;
      w.end = Clock::now();
      if (WIFSIGNALED(status)) {
        w.term_signal = WTERMSIG(status);
      } else {
        w.exit_code = WEXITSTATUS(status);
      }
      if (w.term_signal == 0 && w.exit_code == 0) {
        w.state = WorkerState::kSucceeded;
      } else if (w.stop_requested) {
        w.state = WorkerState::kTerminated;
      } else {
        w.state = WorkerState::kFailed;
        on_failure(w);
      }
    }
    if (!any_running() && !all_reaped_) {
      all_reaped_ = true;
      drain_deadline_ = Clock::now() + std::chrono::seconds(2);
      // Children the workers left behind in their process groups end with them.
      for (const auto& w : workers_) ::kill(-w.pid, SIGKILL);
    }
  }

  // A failure stops the others at once, unless its error only says that a
  // peer is gone: then, from the first such failure, they get kReportWindow to
  // report the error that caused it (see pick_root_cause) or to fail otherwise.
  void on_failure(const WorkerRecord& w) {
    failed_ = true;
    if (signal_ != 0 || stopping_ || killed_) return;
    const auto error = wire::read_worker_error(w.error_file);
    if (error && error->secondary) {
      if (!report_deadline_) report_deadline_ = Clock::now() + kReportWindow;
      return;
    }
    stop_for_local_failure();
  }

  // During the report window: a running worker has written its error file.
  bool running_worker_reported() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const WorkerRecord& w) {
      return w.state == WorkerState::kRunning && ::access(w.error_file.c_str(), F_OK) == 0;
    });
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) return;
    if (signal_ == 0) {
      signal_ = sig;
      say(fmt::format("rankwise-run: received {}; forwarding it to every worker "
                               "(SIGKILL after {:.1f} s)\n",
                               signal_name(sig), o_.grace_period.count() / 1000.0));
      stop_all(sig);
    } else {
      say(fmt::format("rankwise-run: received {} again; killing every worker\n",
                               signal_name(sig)));
      stop_all(SIGKILL);
    }
  }

  void read_pipe(Pipe& p) {
    char buf[65536];
    for (int round = 0; round < 4; ++round) {
      const ssize_t n = ::read(p.fd, buf, sizeof(buf));
      if (n > 0) {
        merger_->on_data(p.worker, p.stream, buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_pipe(p);
      return;
    }
  }

  void close_pipe(Pipe& p) {
    merger_->on_eof(p.worker, p.stream);
    ::close(p.fd);
    p.fd = -1;
  }

  std::chrono::milliseconds hang_check_interval() const {
    return std::clamp<std::chrono::milliseconds>(o_.hang_timeout / 4, std::chrono::milliseconds(100),
                                                 std::chrono::milliseconds(1000));
  }

  bool hang_check_due() const {
    return watchdog_ && !failed_ && !stopping_ && !killed_ && signal_ == 0 && !report_deadline_;
  }

  const WorkerRecord* local_worker(int rank) const {
    const int local = rank - o_.node_rank * o_.nproc_per_node;
    if (local < 0 || static_cast<std::size_t>(local) >= workers_.size()) return nullptr;
    return &workers_[static_cast<std::size_t>(local)];
  }

  // The process of worker `w` that published `v`'s record: the worker itself,
  // or one in its process group (the worker may be a wrapper such as
  // `sh -c 'train; echo done'`); -1 when neither.
  static pid_t rankwise_process(const WorkerRecord& w, const watch::RankView& v) {
    if (!v.progress || v.progress->pid <= 0) return -1;
    const pid_t pid = static_cast<pid_t>(v.progress->pid);
    if (pid == w.pid || ::getpgid(pid) == w.pid) return pid;
    return -1;
  }

  // What the store (`records`, index = rank) and this node's processes say
  // about every rank.
  std::vector<watch::RankView> observe_ranks(const std::vector<std::optional<wire::CollectiveProgress>>& records) {
    std::vector<watch::RankView> views;
    for (int r = 0; r < o_.world_size(); ++r) {
      watch::RankView v;
      v.rank = r;
      if (static_cast<std::size_t>(r) < records.size()) v.progress = records[static_cast<std::size_t>(r)];
      if (const WorkerRecord* w = local_worker(r)) {
        v.local = true;
        v.ended = w->state != WorkerState::kRunning;
        const pid_t rankwise_pid = rankwise_process(*w, v);
        v.stopped = !v.ended && (is_stopped(w->pid) || (rankwise_pid > 0 && is_stopped(rankwise_pid)));
      }
      views.push_back(std::move(v));
    }
    return views;
  }

  void start_monitor() {
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

  bool monitor_due() const { return monitor_ && !stopping_ && !killed_ && signal_ == 0; }

  // --monitor: the latest heartbeats, straggler and stall lines, the table.
  void tick_monitor() {
    next_monitor_ = Clock::now() + kMonitorTick;
    monitor_->observe(observe_ranks(reader_->latest().records), Clock::now());
  }

  void check_hang() {
    next_hang_check_ = Clock::now() + hang_check_interval();
    // Only a new complete read of the store counts: while the store does not
    // answer (a stuck client on libtorch 1.13), nothing is concluded.
    watch::CollectiveProgressReader::Snapshot snapshot = reader_->latest();
    if (snapshot.generation == last_generation_) return;
    last_generation_ = snapshot.generation;
    std::vector<watch::RankView> views = observe_ranks(snapshot.records);
    if (!watchdog_->observe(views, Clock::now())) return;
    std::string report = watch::format_hang_report(views, wire::unix_ms_now(), o_.hang_timeout);
    say(report);
    report += dump_stacks(views);
    if (!o_.log_dir.empty()) {  // the evidence, beside the logs
      std::ofstream(fmt::format("{}/attempt_{}/hang_report.txt", o_.log_dir, c_.attempt)) << report;
    }
    hang_ranks_ = watch::ranks_holding_up(views);
    hang_ = watch::is_deadlock(hang_ranks_, o_.world_size())
                ? "every rank waited in a collective no other rank completed (a deadlock)"
                : util::rank_list(hang_ranks_) + " held the others up";
    failed_ = true;
    stop_for_local_failure();
  }

  // Asks every local worker that can (running, not stopped, its handler
  // installed) for its threads' stacks, prints them and returns what it printed.
  std::string dump_stacks(const std::vector<watch::RankView>& views) {
    std::vector<std::pair<const watch::RankView*, std::string>> asked;
    for (const watch::RankView& v : views) {
      if (!v.local || v.ended || v.stopped || !v.progress || !v.progress->stack_dump) continue;
      // Only the process that installed the handler gets the signal.
      const pid_t pid = rankwise_process(*local_worker(v.rank), v);
      if (pid <= 0) continue;
      const std::string file = stack_dump_file(c_, v.rank);
      ::unlink(file.c_str());
      if (::kill(pid, wire::kStackDumpSignal) == 0) asked.emplace_back(&v, file);
    }
    auto read = [](const std::string& file) {
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      return text.str();
    };
    auto complete = [&](const std::string& file) {
      return read(file).find(wire::kStackDumpEnd) != std::string::npos;
    };
    const auto deadline = Clock::now() + kStackDumpWait;
    while (Clock::now() < deadline &&
           !std::all_of(asked.begin(), asked.end(), [&](const auto& a) { return complete(a.second); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::string printed;
    for (const auto& [view, file] : asked) {
      const std::string raw = read(file);
      printed += raw.empty()
                     ? fmt::format("rankwise-run: rank {} wrote no stack dump within {:.0f} s\n",
                                   view->rank, kStackDumpWait.count() / 1000.0)
                     : fmt::format("rankwise-run: stacks of rank {}:\n", view->rank) +
                           watch::format_stack_dump(raw, "rankwise-run:   ");
    }
    say(printed);
    return printed;
  }

  void loop() {
    std::vector<pollfd> pfds;
    for (;;) {
      reap();
      const bool pipes_open =
          std::any_of(pipes_.begin(), pipes_.end(), [](const Pipe& p) { return p.fd >= 0; });
      if (all_reaped_ && (!pipes_open || Clock::now() >= drain_deadline_)) break;

      auto timeout = o_.monitor_interval;
      const auto now = Clock::now();
      auto until = [&](Clock::time_point t) {
        return std::max<std::chrono::milliseconds>(
            std::chrono::milliseconds(0),
            std::chrono::duration_cast<std::chrono::milliseconds>(t - now) +
                std::chrono::milliseconds(1));
      };
      if (stopping_ && !killed_) timeout = std::min(timeout, until(kill_deadline_));
      if (report_deadline_ && !stopping_) timeout = std::min(timeout, kReportPoll);
      if (all_reaped_) timeout = std::min(timeout, until(drain_deadline_));
      if (hang_check_due()) timeout = std::min(timeout, until(next_hang_check_));
      if (monitor_due()) timeout = std::min(timeout, until(next_monitor_));
      if (group_ && !remote_) timeout = std::min(timeout, kGroupPoll);
      if (c_.membership_changed) timeout = std::min(timeout, kGroupPoll);

      pfds.clear();
      pfds.push_back({signal_pipe_fd(), POLLIN, 0});
      std::vector<std::size_t> index;
      for (std::size_t i = 0; i < pipes_.size(); ++i) {
        if (pipes_[i].fd < 0) continue;
        pfds.push_back({pipes_[i].fd, POLLIN, 0});
        index.push_back(i);
      }
      const int rc = ::poll(pfds.data(), pfds.size(), static_cast<int>(timeout.count()));
      if (rc > 0) {
        for (std::size_t k = 1; k < pfds.size(); ++k) {
          if (pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) read_pipe(pipes_[index[k - 1]]);
        }
        if (pfds[0].revents & POLLIN) {
          for (int sig : drain_signals()) on_signal(sig);
        }
      }
      if (report_deadline_ && !stopping_ && !killed_ &&
          (Clock::now() >= *report_deadline_ || running_worker_reported())) {
        stop_for_local_failure();
      }
      check_group();
      check_membership();
      if (hang_check_due() && Clock::now() >= next_hang_check_) check_hang();
      if (monitor_due() && Clock::now() >= next_monitor_) tick_monitor();
      if (stopping_ && !killed_ && Clock::now() >= kill_deadline_ && any_running()) {
        stop_all(SIGKILL);
      }
    }
    for (auto& p : pipes_) {
      if (p.fd >= 0) close_pipe(p);
    }
    merger_->flush_groups();
  }

  // Elastic: a node waits to join, and this attempt ends for a new round
  // (not a failure; whatever the workers do after SIGTERM is not one either).
  void check_membership() {
    if (!c_.membership_changed || membership_changed_ || signal_ != 0 || stopping_ || killed_ ||
        failed_ || remote_ || all_reaped_) {
      return;
    }
    if (!c_.membership_changed()) return;
    membership_changed_ = true;
    say(fmt::format("rankwise-run: a node is waiting to join the job; stopping every worker for "
                    "a new rendezvous round (SIGKILL after {:.1f} s)\n",
                    o_.grace_period.count() / 1000.0));
    stop_all(SIGTERM);
  }

  void close_logs() {
    for (auto& fds : log_fds_) {
      if (fds.first >= 0) ::close(fds.first);
      if (fds.second >= 0) ::close(fds.second);
    }
    log_fds_.clear();
  }

  const AttemptConfig& c_;
  const LaunchOptions& o_;
  std::optional<output::OutputMerger> merger_;
  std::vector<std::pair<int, int>> log_fds_;
  std::vector<WorkerRecord> workers_;
  std::vector<Pipe> pipes_;
  bool failed_ = false;  // a worker failed (not stopped by the launcher)
  bool membership_changed_ = false;  // stopped for a new round (check_membership)
  std::optional<Clock::time_point> report_deadline_;  // see on_failure
  int signal_ = 0;
  bool stopping_ = false;
  bool killed_ = false;
  bool all_reaped_ = false;
  Clock::time_point kill_deadline_;
  Clock::time_point drain_deadline_;
  Clock::time_point job_start_;
  std::optional<watch::CollectiveProgressReader> reader_;  // with --hang-timeout (several ranks) or --monitor
  uint64_t last_generation_ = 0;         // of the last snapshot observed
  std::optional<watch::HangWatchdog> watchdog_;
  std::optional<watch::RunMonitor> monitor_;  // with --monitor
  Clock::time_point next_monitor_;
  Clock::time_point next_hang_check_;
  std::vector<int> hang_ranks_;  // after a hang: the ranks that held the others up
  std::string hang_;             // ... and the summary's line about it
  std::optional<rendezvous::GroupFailureWatch> group_;  // multi-node
  std::optional<rendezvous::NodeFailure> remote_;       // another node failed first (check_group)
};

}  // namespace

AttemptResult run_attempt(const AttemptConfig& config) { return AttemptRunner(config).run(); }

}  // namespace rankwise::launch::workers
