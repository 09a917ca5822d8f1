#include "launch/attempt_loop.h"

#include "launch/workers/summary.h"

namespace rankwise::launch {

int run_attempt_loop(AttemptMembership& membership, int max_restarts) {
  using Outcome = workers::AttemptResult::Outcome;
  for (int restarts = 0;;) {
    std::optional<int> exit_code;
    workers::AttemptConfig* config = membership.meet(exit_code);
    if (exit_code) return *exit_code;
    if (config == nullptr) continue;
    const workers::AttemptResult result = workers::run_attempt(*config);
    membership.attempt_ended();
    switch (result.outcome) {
      case Outcome::kSucceeded:
        return membership.succeeded();
      case Outcome::kSignaled:
        return membership.signaled(result);
      case Outcome::kMembershipChanged:  // elastic: a node waits to join
        continue;
      case Outcome::kFailed:
        if (membership.failed(*result.failure)) continue;
        if (!workers::restart_after(*result.failure, membership.attempt_name(), restarts,
                                    max_restarts, membership.restart_how())) {
          return membership.gave_up(*result.failure);
        }
        ++restarts;
    }
  }
}

}  // namespace rankwise::launch
