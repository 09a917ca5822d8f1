#pragma once
/// \file worker_process.h
/// Starting and signalling one worker process.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rankwise::launch::workers {

/// What to execute.
struct WorkerSpec {
  std::string path;               ///< resolved executable path
  std::vector<std::string> argv;  ///< argv, [0] included
  std::vector<std::string> env;   ///< complete environment, "NAME=value"
  /// Linux scheduling policy (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE) set in the
  /// child before exec, so every thread of the worker inherits it; -1 keeps
  /// the launcher's.
  int sched_policy = -1;
};

/// A started worker: its pid (also its process group id) and the launcher's
/// non-blocking read ends of its stdout and stderr pipes.
struct SpawnedWorker {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

/// Forks and executes `spec`. The child gets its own process group (so a
/// terminal's Ctrl-C reaches only the launcher, which forwards it), is killed
/// with SIGKILL when the launcher dies (PR_SET_PDEATHSIG), inherits no other
/// descriptor, and has default signal dispositions. Throws std::system_error
/// when the pipes or the fork fail; an exec failure shows up as exit code 127
/// with the reason on the worker's stderr.
SpawnedWorker spawn_worker(const WorkerSpec& spec);

/// Sends `sig` to the worker's whole process group (the worker and any
/// children it did not move elsewhere). Returns false when none is left.
bool signal_worker_group(pid_t pid, int sig);

/// signal_worker_group(pid, SIGTERM), the worker itself told by sigqueue()
/// that it is the launcher's own stop (wire/preemption.h): a Fabric run ends
/// at once instead of saving as on a forwarded SIGTERM.
bool stop_worker_group(pid_t pid);

/// Whether process `pid` is stopped (state T or t in /proc/PID/stat: SIGSTOP,
/// SIGTSTP, a debugger). False when it does not exist.
bool is_stopped(pid_t pid);

/// How many processes the kernel's out-of-memory killer has ended in this
/// process's memory cgroup, which its workers inherit (oom_kill in cgroup
/// v1's memory.oom_control or v2's memory.events); nullopt where it cannot
/// be read (no memory controller, the root cgroup).
std::optional<int64_t> cgroup_oom_kills();

}  // namespace rankwise::launch::workers
