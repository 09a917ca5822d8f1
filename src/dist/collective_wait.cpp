#include "dist/collective_wait.h"
#include "util/text.h"

#include "core/check.h"

#include "rankwise/error.h"

namespace rankwise::dist {

void run_collective(const std::string& where, const std::string& operation,
                    std::chrono::milliseconds timeout,
                    const std::function<c10::intrusive_ptr<c10d::Work>()>& launch,
                    const std::function<std::string()>& explain) {
  const auto start = std::chrono::steady_clock::now();
  auto work = launch();
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    const auto waited = std::chrono::steady_clock::now() - start;
    const std::string message = core::message("{}: {} failed", where, operation);
    const std::string why = explain ? explain() : "";
    // c10d's first line: the rest is c10's C++ stack trace (libtorch 1.13).
    const std::string original = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
    if (waited >= timeout) {
      throw TimeoutError(fmt::format(
          "{} after a timeout of {} ms: not every rank reached this collective{}. Check that every "
          "rank calls the same collectives in the same order. Original error: {}",
          message, timeout.count(), (why.empty() ? "" : ": " + why), original));
    }
    throw PeerError(message + ": a peer rank probably exited or crashed; see its output" +
                    (why.empty() ? "" : ". " + why) + ". Original error: " + original);
  }
}

}  // namespace rankwise::dist
