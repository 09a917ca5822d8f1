#pragma once
// The calling thread's Linux scheduling policy (sched_setscheduler(2) with
// pid 0 changes the calling thread only; threads it creates inherit it).

namespace rankwise::detail {

/// The calling thread's policy (SCHED_OTHER, SCHED_BATCH, ...).
int thread_sched_policy();

/// Sets the calling thread's policy (non-real-time policies need no
/// privileges). Returns false, changing nothing, when the kernel refuses.
bool set_thread_sched_policy(int policy);

}  // namespace rankwise::detail
