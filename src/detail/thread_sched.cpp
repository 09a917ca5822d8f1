#include "detail/thread_sched.h"

#include <sched.h>

namespace rankwise::detail {

int thread_sched_policy() { return ::sched_getscheduler(0); }

bool set_thread_sched_policy(int policy) {
  sched_param param{};
  return ::sched_setscheduler(0, policy, &param) == 0;
}

}  // namespace rankwise::detail
