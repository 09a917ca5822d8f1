#pragma once
/// \file cpu_sched.h
/// The workers' Linux scheduling policy (--cpu-sched): names and values.

#include <string>

#include "launch/options.h"

namespace rankwise::launch::workers {

/// Parses --cpu-sched's value: inherit, normal, batch or idle. Throws
/// UsageError naming the value and the accepted ones otherwise.
CpuSched parse_cpu_sched(const std::string& value);

/// The value as --cpu-sched spells it.
const char* cpu_sched_name(CpuSched policy);

/// The sched_setscheduler(2) policy (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE),
/// or -1 for kInherit (the launcher leaves its own).
int linux_sched_policy(CpuSched policy);

/// Checks that this process may give its workers `policy` (tried on a
/// thread of its own, which then ends): the kernel refuses an unprivileged
/// process that runs under SCHED_IDLE a move to normal or batch (unless
/// RLIMIT_NICE allows it). Throws UsageError saying so and what to use
/// instead; does nothing for kInherit.
void check_cpu_sched_allowed(CpuSched policy);

}  // namespace rankwise::launch::workers
