#include "launch/rendezvous/off_thread.h"

#include <future>
#include <memory>
#include <thread>

namespace rankwise::launch::rendezvous {

Waited run_off_thread(std::function<void(const std::atomic<bool>& cancel)> work,
                      std::chrono::steady_clock::time_point deadline,
                      const std::function<bool()>& interrupted) {
  struct Shared {
    std::atomic<bool> cancel{false};
    std::promise<void> done;
  };
  auto shared = std::make_shared<Shared>();
  std::future<void> done = shared->done.get_future();
  std::thread([shared, work = std::move(work)] {
    try {
      work(shared->cancel);
      shared->done.set_value();
    } catch (...) {
      shared->done.set_exception(std::current_exception());
    }
  }).detach();
  for (;;) {
    if (done.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready) {
      done.get();
      return Waited::kDone;
    }
    const bool stop = interrupted();
    if (stop || std::chrono::steady_clock::now() >= deadline) {
      shared->cancel = true;
      return stop ? Waited::kInterrupted : Waited::kDeadline;
    }
  }
}

}  // namespace rankwise::launch::rendezvous
