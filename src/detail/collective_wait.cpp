#include "detail/collective_wait.h"

#include "rankwise/error.h"

namespace rankwise {
namespace detail {

void run_collective(const std::string& where, const char* operation,
                    std::chrono::milliseconds timeout,
                    const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) {
  const auto start = std::chrono::steady_clock::now();
  auto work = launch();
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    const auto waited = std::chrono::steady_clock::now() - start;
    const std::string message = "rankwise: " + where + ": " + operation + " failed";
    if (waited >= timeout) {
      throw TimeoutError(message + " after a timeout of " + std::to_string(timeout.count()) +
                         " ms: not every rank reached this collective. Check that every rank "
                         "calls the same collectives in the same order. Original error: " +
                         e.what());
    }
    throw PeerError(message + ": a peer rank probably exited or crashed; see its output. "
                              "Original error: " + e.what());
  }
}

}  // namespace detail
}  // namespace rankwise
