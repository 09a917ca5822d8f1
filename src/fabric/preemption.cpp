#include "fabric/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "rankwise/dist/consensus.h"
#include "wire/preemption.h"

namespace rankwise::fabric {
namespace {

std::atomic<bool> sigterm_noted{false};
struct sigaction earlier_action {};

void write_stderr(const char* text) {
  std::size_t n = 0;
  while (text[n] != '\0') ++n;
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, text, n);
}

// Async-signal-safe: notes the first SIGTERM; the launcher's own stop or a
// second SIGTERM ends the process as SIGTERM's default action would.
void on_sigterm(int, siginfo_t* info, void*) {
  const bool stop_now = info != nullptr && info->si_code == SI_QUEUE &&
                        info->si_value.sival_int == wire::kStopNowSignalValue;
  if (stop_now || sigterm_noted.exchange(true)) {
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
    return;
  }
  write_stderr("rankwise: SIGTERM: this rank saves a checkpoint at the next check, then exits (a "
               "second SIGTERM ends it now)\n");
}

}  // namespace

void Preemption::arm(int64_t every) {
  every_ = std::max<int64_t>(every, 1);
  if (armed_) return;
  struct sigaction action {};
  action.sa_sigaction = on_sigterm;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, &earlier_action);
  armed_ = true;
}

void Preemption::disarm() {
  if (!armed_) return;
  armed_ = false;
  ::sigaction(SIGTERM, &earlier_action, nullptr);
  if (sigterm_noted.exchange(false)) ::raise(SIGTERM);
}

bool Preemption::after_batch() {
  if (!armed_ || agreed_) return agreed_;
  if (++batches_ % every_ == 0) check_now();
  return agreed_;
}

bool Preemption::check_now() {
  if (!armed_) return false;
  if (!agreed_) agreed_ = dist::any(sigterm_noted.load());  // local without a group
  return agreed_;
}

}  // namespace rankwise::fabric
