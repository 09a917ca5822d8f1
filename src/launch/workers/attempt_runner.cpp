// An attempt from start to end: the poll() loop over the signal pipe and
// every worker's pipes, and how the attempt ended.
#include "launch/workers/attempt_runner.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "launch/output/say.h"
#include "launch/workers/signals.h"
#include "wire/preemption.h"

namespace rankwise::launch::workers {

AttemptResult AttemptRunner::run() {
  open_output();
  job_start_ = Clock::now();
  start_watches();
  spawn_workers();

  loop();
  close_logs();
  if (monitor_) {  // after the workers' last heartbeats (published as they exit)
    const std::vector<watch::RankView> views = observe_ranks(reader_->read_now(kFinalRead).records);
    monitor_->finish(&views, Clock::now());
  }
  return result();
}

AttemptResult AttemptRunner::result() {
  AttemptResult result;
  if (signal_ != 0) {
    result.outcome = AttemptResult::Outcome::kSignaled;
    result.signal = signal_;
    result.preempted = std::all_of(workers_.begin(), workers_.end(), [](const WorkerRecord& w) {
      return w.term_signal == 0 && w.exit_code == wire::kPreemptedExitCode;
    });
    if (!result.preempted && worker_reported(/*running_only=*/false)) result.failure = failure_report();
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

void AttemptRunner::say(std::string_view text) {
  if (merger_) {
    merger_->write_own(2, text);
  } else {
    output::write_all(2, text);
  }
}

void AttemptRunner::loop() {
  for (;;) {
    reap();
    const bool pipes_open =
        std::any_of(pipes_.begin(), pipes_.end(), [](const Pipe& p) { return p.fd >= 0; });
    if (all_reaped_ && (!pipes_open || Clock::now() >= drain_deadline_)) break;
    poll_pipes(poll_timeout());
    run_checks();
  }
  for (auto& p : pipes_) {
    if (p.fd >= 0) close_pipe(p);
  }
  merger_->flush_groups();
}

// The longest poll() may wait: --monitor-interval, or less when something
// is due sooner.
std::chrono::milliseconds AttemptRunner::poll_timeout() const {
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
  return timeout;
}

// Waits at most `timeout` for output or a signal, and handles what came.
void AttemptRunner::poll_pipes(std::chrono::milliseconds timeout) {
  std::vector<pollfd> pfds;
  pfds.push_back({signal_pipe_fd(), POLLIN, 0});
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < pipes_.size(); ++i) {
    if (pipes_[i].fd < 0) continue;
    pfds.push_back({pipes_[i].fd, POLLIN, 0});
    index.push_back(i);
  }
  const int rc = ::poll(pfds.data(), pfds.size(), static_cast<int>(timeout.count()));
  if (rc <= 0) return;
  for (std::size_t k = 1; k < pfds.size(); ++k) {
    if (pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) read_pipe(pipes_[index[k - 1]]);
  }
  if (pfds[0].revents & POLLIN) {
    for (int sig : drain_signals()) on_signal(sig);
  }
}

// What is due after each poll: the end of the report window, another node's
// failure, a new round, the hang check, the monitor, SIGKILL after the grace
// period.
void AttemptRunner::run_checks() {
  if (report_deadline_ && !stopping_ && !killed_ &&
      (Clock::now() >= *report_deadline_ || worker_reported(/*running_only=*/true))) {
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

void AttemptRunner::read_pipe(Pipe& p) {
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

void AttemptRunner::close_pipe(Pipe& p) {
  merger_->on_eof(p.worker, p.stream);
  ::close(p.fd);
  p.fd = -1;
}

void AttemptRunner::close_logs() {
  for (auto& fds : log_fds_) {
    if (fds.first >= 0) ::close(fds.first);
    if (fds.second >= 0) ::close(fds.second);
  }
  log_fds_.clear();
}

}  // namespace rankwise::launch::workers
