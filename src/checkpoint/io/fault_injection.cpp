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
  std::string kind;  // "", "sleep_ms", "kill_at_byte", "kill_at"
  std::string value;
  bool slept = false;
};

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
    } else if (ok && f.kind != "kill_at") {
      ok = false;
    }
    if (!ok) {
      core::raise<ConfigError>(
          "{}='{}' is not sleep_ms=N, kill_at_byte=N or kill_at=PHASE (a testing knob; unset it)",
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
  if (f.kind == "kill_at" && f.value == phase) die();
}

}  // namespace rankwise::checkpoint::io
