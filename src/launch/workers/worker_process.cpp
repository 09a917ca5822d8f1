#include "launch/workers/worker_process.h"

#include <fstream>
#include <string>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <system_error>

#include "wire/preemption.h"

namespace rankwise::launch::workers {

namespace {

void close_from(int lowfd) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, lowfd, ~0U, 0) == 0) return;
#endif
  rlimit rl{};
  int maxfd = 4096;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    maxfd = static_cast<int>(rl.rlim_cur);
  }
  for (int fd = lowfd; fd < maxfd; ++fd) ::close(fd);
}

void child_fail(const char* what, int err) {
  // async-signal-safe reporting only, in one write so that the line is whole
  char line[1024];
  std::size_t n = 0;
  const char* parts[] = {"rankwise-run: cannot start worker: ", what, ": ", strerror(err), "\n"};
  for (const char* part : parts) {
    for (const char* c = part; *c && n < sizeof(line) - 1; ++c) line[n++] = *c;
  }
  if (n == sizeof(line) - 1) line[n - 1] = '\n';
  (void)!::write(2, line, n);
  _exit(127);
}

}  // namespace

SpawnedWorker spawn_worker(const WorkerSpec& spec) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    throw std::system_error(e, std::generic_category(), "pipe");
  }
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls (the launcher has threads: the TCPStore server).
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  // Signals stay blocked across fork until the child has dropped the
  // launcher's handlers: a SIGTERM sent to a worker that has not yet exec'd
  // must kill it, not run the launcher's handler (which would write into the
  // launcher's own signal pipe and look like a SIGTERM to the launcher).
  sigset_t all, saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw std::system_error(e, std::generic_category(), "fork");
  }
  if (pid == 0) {
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // pending signals now take their default action
    ::setpgid(0, 0);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail("prctl(PR_SET_PDEATHSIG)", errno);
    if (::getppid() != parent) _exit(128 + SIGKILL);  // the launcher already died
    if (spec.sched_policy >= 0) {
      sched_param param{};
      if (::sched_setscheduler(0, spec.sched_policy, &param) != 0) {
        child_fail("sched_setscheduler (--cpu-sched)", errno);
      }
    }
    if (::dup2(out[1], 1) < 0 || ::dup2(err[1], 2) < 0) child_fail("dup2", errno);
    close_from(3);
    ::execve(spec.path.c_str(), argv.data(), envp.data());
    child_fail(spec.path.c_str(), errno);
  }
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  ::setpgid(pid, pid);  // also in the parent, so signalling the group never races the child
  ::close(out[1]);
  ::close(err[1]);
  for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return SpawnedWorker{pid, out[0], err[0]};
}

bool signal_worker_group(pid_t pid, int sig) {
  if (pid <= 0) return false;
  if (::kill(-pid, sig) == 0) return true;
  // The group may not exist yet (setpgid race) or only the leader is left.
  return ::kill(pid, sig) == 0;
}

bool stop_worker_group(pid_t pid) {
  if (pid <= 0) return false;
  union sigval value {};
  value.sival_int = wire::kStopNowSignalValue;
  ::sigqueue(pid, SIGTERM, value);  // pending first: the group's SIGTERM below merges into it
  return signal_worker_group(pid, SIGTERM);
}

bool is_stopped(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'T' || state == 't';
}

}  // namespace rankwise::launch::workers

namespace rankwise::launch::workers {

namespace {
// `key`'s value in a file of "key value" lines.
std::optional<int64_t> counter(const std::string& path, const std::string& key) {
  std::ifstream file(path);
  std::string name;
  int64_t value = 0;
  while (file >> name >> value) {
    if (name == key) return value;
  }
  return std::nullopt;
}
}  // namespace

std::optional<int64_t> cgroup_oom_kills() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {  // "4:memory:/path" (v1), "0::/path" (v2)
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers == "memory") return counter("/sys/fs/cgroup/memory" + path + "/memory.oom_control", "oom_kill");
    if (controllers.empty() && path != "/") {
      if (auto kills = counter("/sys/fs/cgroup" + path + "/memory.events", "oom_kill")) return kills;
    }
  }
  return std::nullopt;
}

}  // namespace rankwise::launch::workers
