#include "fabric/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <exception>

#include "rankwise/dist/consensus.h"
#include "wire/preemption.h"

namespace rankwise::fabric {
namespace {

// CLOCK_MONOTONIC of the noted SIGTERM; 0 while none is noted.
std::atomic<int64_t> noted_ns{0};
struct sigaction earlier_action {};

// The copies of one stop request: a scheduler that signals every process of
// the job (Slurm, systemd) and rankwise-run's forwarded copy arrive together.
constexpr int64_t kSameRequestNs = 2'000'000'000;

int64_t monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void write_stderr(const char* text) {
  std::size_t n = 0;
  while (text[n] != '\0') ++n;
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, text, n);
}

// Async-signal-safe: notes the first SIGTERM; the launcher's own stop or a
// SIGTERM 2 s or more after the noted one ends the process as SIGTERM's
// default action would.
void on_sigterm(int, siginfo_t* info, void*) {
  const bool stop_now = info != nullptr && info->si_code == SI_QUEUE &&
                        info->si_value.sival_int == wire::kStopNowSignalValue;
  if (!stop_now) {
    const int64_t now = monotonic_ns();
    int64_t first = 0;
    if (noted_ns.compare_exchange_strong(first, now)) {
      write_stderr("rankwise: SIGTERM: this rank saves a checkpoint at the next check, then exits "
                   "(a SIGTERM 2 s or more later ends it now)\n");
      return;
    }
    if (now - first < kSameRequestNs) return;  // another copy of the same request
  }
  ::signal(SIGTERM, SIG_DFL);
  ::raise(SIGTERM);
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
  // While an error unwinds the run (a preemption save that failed), the
  // error ends the process and is reported; the noted SIGTERM is dropped.
  if (noted_ns.exchange(0) != 0 && std::uncaught_exceptions() == 0) ::raise(SIGTERM);
}

bool Preemption::after_batch() {
  if (!armed_ || agreed_) return agreed_;
  if (++batches_ % every_ == 0) check_now();
  return agreed_;
}

bool Preemption::check_now() {
  if (!armed_) return false;
  if (!agreed_) agreed_ = dist::any(noted_ns.load() != 0);  // local without a group
  return agreed_;
}

}  // namespace rankwise::fabric
