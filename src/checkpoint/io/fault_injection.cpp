#include "checkpoint/io/fault_injection.h"

#include "core/check.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "rankwise/env.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::io {
namespace {

constexpr const char* kVariable = "RANKWISE_CHECKPOINT_FAULT";

struct Fault {
  std::string kind;  // "", "sleep_ms", "kill_at_byte", "kill_at", "fail_at"
  std::string value;  // kill_at, fail_at: the phase, without its "@N"
  int64_t arrivals = 1;  // kill_at, fail_at: act at the N-th arrival at the phase
  bool slept = false;
};

// "PHASE" or "PHASE@N" (N >= 1) into `f`; false when malformed.
bool parse_phase(Fault& f) {
  const auto at = f.value.find('@');
  if (at == std::string::npos) return true;
  const std::string count = f.value.substr(at + 1);
  f.value.resize(at);
  if (f.value.empty() || count.empty() || count.size() > 9 ||
      count.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  f.arrivals = std::stoll(count);
  return f.arrivals >= 1;
}

Fault& fault() {
  static Fault parsed = [] {
    Fault f;
    auto text = get_env(kVariable);
    if (!text || text->empty()) return f;
    auto eq = text->find('=');
    f.kind = text->substr(0, eq);
    f.value = eq == std::string::npos ? "" : text->substr(eq + 1);
    bool ok = eq != std::string::npos && !f.value.empty();
    if (ok && (f.kind == "sleep_ms" || f.kind == "kill_at_byte")) {
      ok = f.value.find_first_not_of("0123456789") == std::string::npos;
    } else if (ok && (f.kind == "kill_at" || f.kind == "fail_at")) {
      ok = parse_phase(f);
    } else {
      ok = false;
    }
    if (!ok) {
      core::raise<ConfigError>(
          "{}='{}' is not sleep_ms=N, kill_at_byte=N, kill_at=PHASE[@N] or fail_at=PHASE[@N] (a "
          "testing knob; unset it)",
          kVariable, *text);
    }
    return f;
  }();
  return parsed;
}

[[noreturn]] void die() {
  ::kill(::getpid(), SIGKILL);
  ::pause();
  std::abort();
}

}  // namespace

void fault_after_bytes(std::size_t written) {
  Fault& f = fault();
  if (f.kind == "kill_at_byte" && written >= std::stoull(f.value)) die();
  if (f.kind == "sleep_ms" && !f.slept && written > 0) {
    f.slept = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(f.value)));
  }
}

void fault_at(const char* phase) {
  Fault& f = fault();
  if ((f.kind != "kill_at" && f.kind != "fail_at") || f.value != phase || --f.arrivals != 0) return;
  if (f.kind == "kill_at") die();
  core::raise<CheckpointError>("{}: an injected I/O error at {} (a testing knob; unset it)",
                               kVariable, phase);
}

}  // namespace rankwise::checkpoint::io
