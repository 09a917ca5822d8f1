#include "launch/watch/collective_progress_reader.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <mutex>

namespace rankwise::launch::watch {

struct CollectiveProgressReader::State {
  std::mutex mutex;
  Snapshot latest;
  uint64_t tickets = 0;  // request_read() calls
  std::string prefix;
  int world_size = 0;

  // One read of every rank's record (the poller's thread); `ticket` is
  // served by it.
  void read(c10d::TCPStore& store, uint64_t ticket) {
    std::vector<std::optional<wire::CollectiveProgress>> records(
        static_cast<std::size_t>(world_size));
    for (int r = 0; r < world_size; ++r) {
      if (auto text = rendezvous::read_if_set(store, prefix + "/" + wire::progress_key(r))) {
        records[static_cast<std::size_t>(r)] = wire::decode_progress(*text);
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    ++latest.generation;
    latest.served = std::max(latest.served, ticket);
    latest.records = std::move(records);
  }
};

namespace {
std::shared_ptr<CollectiveProgressReader::State> make_state(const std::string& prefix,
                                                            int world_size) {
  auto state = std::make_shared<CollectiveProgressReader::State>();
  state->prefix = prefix;
  state->world_size = world_size;
  return state;
}
}  // namespace

CollectiveProgressReader::CollectiveProgressReader(const std::string& addr, int port, const std::string& prefix,
                               int world_size, std::chrono::milliseconds interval)
    : state_(make_state(prefix, world_size)),
      poller_(addr, port, interval,
              [state = state_](c10d::TCPStore& store) { state->read(store, 0); }) {}

CollectiveProgressReader::Snapshot CollectiveProgressReader::latest() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->latest;
}

uint64_t CollectiveProgressReader::request_read() {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    ticket = ++state_->tickets;
  }
  poller_.post([state = state_, ticket](c10d::TCPStore& store) { state->read(store, ticket); });
  return ticket;
}

CollectiveProgressReader::Snapshot CollectiveProgressReader::read_now(
    std::chrono::milliseconds timeout) {
  request_read();
  poller_.flush(timeout);  // the posted read is done, or the timeout passed
  return latest();
}

}  // namespace rankwise::launch::watch
