#include "launch/rendezvous/store_poller.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

namespace rankwise::launch::rendezvous {

std::optional<std::string> read_if_set(c10d::TCPStore& store, const std::string& key) {
  if (!store.check({key})) return std::nullopt;
  const std::vector<uint8_t> value = store.get(key);
  return std::string(value.begin(), value.end());
}

struct StorePoller::State {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  bool finished = false;
  std::deque<Task> writes;
  std::string addr;
  int port = 0;
  std::chrono::milliseconds interval{1000};
  Task poll;

  void run() {
    std::unique_ptr<c10d::TCPStore> store;
    bool first = true, failed = false;
    for (;;) {
      std::deque<Task> pending;
      {
        std::unique_lock<std::mutex> lock(mutex);
        // After a failure, the interval passes before a retry, writes or not.
        if (!first) {
          wake.wait_for(lock, interval, [&] { return stop || (!failed && !writes.empty()); });
        }
        if (stop) break;
        pending = writes;  // removed once done: flush() waits for them
      }
      first = false;
      failed = false;
      try {
        if (!store) {
          c10d::TCPStoreOptions o;
          o.port = static_cast<std::uint16_t>(port);
          o.isServer = false;
          o.waitWorkers = false;
          o.timeout = std::chrono::milliseconds(2000);
          store = std::make_unique<c10d::TCPStore>(addr, o);
        }
        for (const Task& write : pending) {
          write(*store);
          std::lock_guard<std::mutex> lock(mutex);
          writes.pop_front();
          wake.notify_all();
        }
        poll(*store);
      } catch (const std::exception&) {
        store.reset();  // reconnect next time; what failed is retried
        failed = true;
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    finished = true;
    wake.notify_all();
  }
};

StorePoller::StorePoller(const std::string& addr, int port, std::chrono::milliseconds interval,
                         Task poll)
    : state_(std::make_shared<State>()) {
  state_->addr = addr;
  state_->port = port;
  state_->interval = interval;
  state_->poll = std::move(poll);
  thread_ = std::thread([state = state_] { state->run(); });
}

StorePoller::~StorePoller() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
  const bool ended =
      state_->wake.wait_for(lock, std::chrono::seconds(1), [&] { return state_->finished; });
  lock.unlock();
  if (ended) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void StorePoller::post(Task write) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->writes.push_back(std::move(write));
  state_->wake.notify_all();
}

bool StorePoller::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->wake.wait_for(lock, timeout, [&] { return state_->writes.empty(); });
}

}  // namespace rankwise::launch::rendezvous
