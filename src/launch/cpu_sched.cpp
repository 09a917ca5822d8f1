#include "launch/cpu_sched.h"

#include <sched.h>

#include <fmt/format.h>

namespace rankwise {
namespace launch {

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

}  // namespace launch
}  // namespace rankwise
