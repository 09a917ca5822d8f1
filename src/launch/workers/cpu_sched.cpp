#include "launch/workers/cpu_sched.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace rankwise::launch::workers {

CpuSched parse_cpu_sched(const std::string& value) {
  for (auto policy : {CpuSched::kInherit, CpuSched::kNormal, CpuSched::kBatch, CpuSched::kIdle}) {
    if (value == cpu_sched_name(policy)) return policy;
  }
  throw UsageError(fmt::format(
      "--cpu-sched '{}': use inherit, normal, batch or idle (policies that need no privileges; "
      "see rankwise-run -h)",
      value));
}

const char* cpu_sched_name(CpuSched policy) {
  switch (policy) {
    case CpuSched::kInherit: return "inherit";
    case CpuSched::kNormal: return "normal";
    case CpuSched::kBatch: return "batch";
    case CpuSched::kIdle: return "idle";
  }
  return "?";
}

int linux_sched_policy(CpuSched policy) {
  switch (policy) {
    case CpuSched::kInherit: return -1;
    case CpuSched::kNormal: return SCHED_OTHER;
    case CpuSched::kBatch: return SCHED_BATCH;
    case CpuSched::kIdle: return SCHED_IDLE;
  }
  return -1;
}

void check_cpu_sched_allowed(CpuSched policy) {
  const int wanted = linux_sched_policy(policy);
  if (wanted < 0) return;
  int error = 0;
  std::thread([&] {
    sched_param param{};
    if (::sched_setscheduler(0, wanted, &param) != 0) error = errno;  // this thread only
  }).join();
  if (error == 0) return;
  const int current = ::sched_getscheduler(0);
  throw UsageError(fmt::format(
      "--cpu-sched {}: the kernel refuses it ({}){}; give --cpu-sched inherit (or idle), or start "
      "rankwise-run under the policy you want (e.g. chrt -b 0 rankwise-run ...)",
      cpu_sched_name(policy), std::strerror(error),
      current == SCHED_IDLE ? ": this launcher runs under SCHED_IDLE, which an unprivileged "
                              "process may not leave (RLIMIT_NICE)"
                            : ""));
}

}  // namespace rankwise::launch::workers
