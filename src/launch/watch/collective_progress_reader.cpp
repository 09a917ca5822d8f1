#include "launch/watch/collective_progress_reader.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <mutex>

namespace rankwise::launch::watch {

struct CollectiveProgressReader::State {
  std::mutex mutex;
  Snapshot latest;
};

CollectiveProgressReader::CollectiveProgressReader(const std::string& addr, int port, const std::string& prefix,
                               int world_size, std::chrono::milliseconds interval)
    : state_(std::make_shared<State>()),
      poller_(addr, port, interval, [state = state_, prefix, world_size](c10d::TCPStore& store) {
        std::vector<std::optional<wire::CollectiveProgress>> records(
            static_cast<std::size_t>(world_size));
        for (int r = 0; r < world_size; ++r) {
          if (auto text = rendezvous::read_if_set(store, prefix + "/" + wire::progress_key(r))) {
            records[static_cast<std::size_t>(r)] = wire::decode_progress(*text);
          }
        }
        std::lock_guard<std::mutex> lock(state->mutex);
        ++state->latest.generation;
        state->latest.records = std::move(records);
      }) {}

CollectiveProgressReader::Snapshot CollectiveProgressReader::latest() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->latest;
}

}  // namespace rankwise::launch::watch
