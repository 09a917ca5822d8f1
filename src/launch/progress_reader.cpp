#include "launch/progress_reader.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <condition_variable>
#include <mutex>

namespace rankwise {
namespace launch {

struct ProgressReader::State {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  bool finished = false;
  Snapshot latest;
  std::string addr;
  int port = 0;
  std::string prefix;
  int world_size = 0;
  std::chrono::milliseconds interval{1000};

  void run() {
    std::unique_ptr<c10d::TCPStore> store;
    uint64_t generation = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (generation > 0) wake.wait_for(lock, interval, [&] { return stop; });
        if (stop) break;
      }
      std::vector<std::optional<detail::ProgressRecord>> records(
          static_cast<std::size_t>(world_size));
      try {
        if (!store) {
          c10d::TCPStoreOptions o;
          o.port = static_cast<std::uint16_t>(port);
          o.isServer = false;
          o.waitWorkers = false;
          o.timeout = std::chrono::milliseconds(2000);
          store = std::make_unique<c10d::TCPStore>(addr, o);
        }
        for (int r = 0; r < world_size; ++r) {
          const std::string key = prefix + "/" + detail::progress_key(r);
          if (!store->check({key})) continue;
          const std::vector<uint8_t> value = store->get(key);
          records[static_cast<std::size_t>(r)] =
              detail::decode_progress(std::string(value.begin(), value.end()));
        }
      } catch (const std::exception&) {
        store.reset();  // reconnect next time; this read is incomplete
        generation = std::max<uint64_t>(generation, 1);  // wait the interval first
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex);
      latest.generation = ++generation;
      latest.records = std::move(records);
    }
    std::lock_guard<std::mutex> lock(mutex);
    finished = true;
    wake.notify_all();
  }
};

ProgressReader::ProgressReader(const std::string& addr, int port, const std::string& prefix,
                               int world_size, std::chrono::milliseconds interval)
    : state_(std::make_shared<State>()) {
  state_->addr = addr;
  state_->port = port;
  state_->prefix = prefix;
  state_->world_size = world_size;
  state_->interval = interval;
  thread_ = std::thread([state = state_] { state->run(); });
}

ProgressReader::~ProgressReader() {
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

ProgressReader::Snapshot ProgressReader::latest() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->latest;
}

}  // namespace launch
}  // namespace rankwise
