// An attempt's workers ending: reaping them, a failure stopping the others,
// the launcher's signals forwarded, SIGKILL after the grace period, and a new
// elastic round stopping them all.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>

#include "launch/workers/attempt_runner.h"
#include "launch/workers/worker_process.h"
#include "wire/error_file.h"

namespace rankwise::launch::workers {

bool AttemptRunner::any_running() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const WorkerRecord& w) { return w.state == WorkerState::kRunning; });
}

void AttemptRunner::stop_all(int sig, bool forwarded) {
  for (auto& w : workers_) {
    if (w.state != WorkerState::kRunning) continue;
    if (!w.stop_requested) {
      w.stop_time = Clock::now();
      w.was_stopped = is_stopped(w.pid);
    }
    w.stop_requested = true;
    if (sig == SIGTERM && !forwarded) {
      stop_worker_group(w.pid);
    } else {
      signal_worker_group(w.pid, sig);
    }
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

void AttemptRunner::reap() {
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    WorkerRecord& w = workers_[i];
    if (w.state != WorkerState::kRunning) continue;
    int status = 0;
    const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r != w.pid) continue;
    w.end = Clock::now();
    if (WIFSIGNALED(status)) {
      w.term_signal = WTERMSIG(status);
      if (w.term_signal == SIGKILL && !w.stop_requested && oom_kills_at_start_) {
        w.out_of_memory = cgroup_oom_kills().value_or(0) > *oom_kills_at_start_;
      }
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
void AttemptRunner::on_failure(const WorkerRecord& w) {
  failed_ = true;
  if (signal_ != 0 || stopping_ || killed_) return;
  const auto error = wire::read_worker_error(w.error_file);
  if (error && error->secondary) {
    if (!report_deadline_) report_deadline_ = Clock::now() + kReportWindow;
    return;
  }
  stop_for_local_failure();
}

bool AttemptRunner::worker_reported(bool running_only) const {
  return std::any_of(workers_.begin(), workers_.end(), [&](const WorkerRecord& w) {
    return (!running_only || w.state == WorkerState::kRunning) &&
           ::access(w.error_file.c_str(), F_OK) == 0;
  });
}

void AttemptRunner::on_signal(int sig) {
  if (sig == SIGCHLD) return;
  if (signal_ == 0) {
    signal_ = sig;
    say(fmt::format(
        "rankwise-run: received {}; forwarding it to every worker (SIGKILL after {:.1f} s)\n",
        signal_name(sig), o_.grace_period.count() / 1000.0));
    stop_all(sig, /*forwarded=*/true);
  } else {
    say(fmt::format("rankwise-run: received {} again; killing every worker\n", signal_name(sig)));
    stop_all(SIGKILL);
  }
}

// Elastic: a node waits to join, and this attempt ends for a new round
// (not a failure; whatever the workers do after SIGTERM is not one either).
void AttemptRunner::check_membership() {
  if (!c_.membership_changed || membership_changed_ || signal_ != 0 || stopping_ || killed_ ||
      failed_ || remote_ || all_reaped_) {
    return;
  }
  if (!c_.membership_changed()) return;
  membership_changed_ = true;
  say(fmt::format(
      "rankwise-run: a node is waiting to join the job; stopping every worker for a new "
      "rendezvous round (SIGKILL after {:.1f} s)\n",
      o_.grace_period.count() / 1000.0));
  stop_all(SIGTERM);
}

}  // namespace rankwise::launch::workers
