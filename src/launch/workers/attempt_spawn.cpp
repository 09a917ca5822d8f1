// An attempt's start: the output merger (tags, log files), the watches of
// the job's store, and the workers themselves.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "launch/output/console_streams.h"
#include "launch/output/tag_template.h"
#include "launch/workers/attempt_runner.h"
#include "launch/workers/cpu_sched.h"
#include "launch/workers/worker_process.h"
#include "wire/collective_progress.h"

namespace rankwise::launch::workers {

namespace {
int open_log(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    throw std::system_error(error, std::generic_category(),
                            fmt::format("cannot open log file {}", path));
  }
  return fd;
}
}  // namespace

void AttemptRunner::open_output() {
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
}

void AttemptRunner::start_watches() {
  const std::string attempt_prefix = wire::attempt_prefix(c_.attempt, c_.job_key);
  if (c_.hang_check || o_.monitor) {
    reader_.emplace(o_.master_addr, c_.master_port, attempt_prefix, o_.world_size(),
                    c_.hang_check ? hang_check_interval() : kMonitorTick);
  }
  if (c_.hang_check) {
    watchdog_.emplace(o_.hang_timeout, o_.deadlock_timeout);
    next_hang_check_ = job_start_ + hang_check_interval();
  }
  if (o_.monitor) start_monitor();
  if (o_.nnodes > 1) {
    group_.emplace(o_.master_addr, c_.master_port, attempt_prefix, c_.job_key, kGroupPoll,
                   o_.node_rank, o_.nnodes, o_.launcher_silence_limit);
    // Learn the other nodes' hosts before the workers start: a node lost at
    // once is then named with its host.
    group_->wait_until_read(std::chrono::seconds(5));
  }
}

void AttemptRunner::spawn_workers() {
  const int n = o_.nproc_per_node;
  oom_kills_at_start_ = cgroup_oom_kills();
  for (int l = 0; l < n; ++l) {
    WorkerRecord rec;
    rec.local_rank = l;
    rec.rank = o_.node_rank * n + l;
    WorkerSpec spec{o_.program, o_.program_argv, worker_environment(c_, l),
                    linux_sched_policy(o_.cpu_sched)};
    set_environment_variable(spec.env, output::kStdoutIsTtyVariable,
                             merger_->shows_in_place(l) ? "1" : "0");
    rec.error_file = worker_error_file(c_, rec.rank);
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
}

}  // namespace rankwise::launch::workers
