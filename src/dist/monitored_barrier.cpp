#include "dist/monitored_barrier.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <fmt/format.h>

#include <map>
#include <thread>

#include "rankwise/error.h"
#include "util/text.h"

namespace rankwise::dist {

MonitoredBarrier::MonitoredBarrier(c10d::Store& store, core::At at, std::string name,
                                   std::string site, uint64_t instance, uint64_t sequence)
    : store_(store),
      at_(at),
      name_(std::move(name)),
      site_(std::move(site)),
      key_(fmt::format("monitored_barrier/{}", instance)),
      what_(fmt::format("monitored_barrier '{}' (#{} at {})", name_, sequence, site_)) {}

std::string MonitoredBarrier::arrived_key(int rank) const {
  return fmt::format("{}/arrived/{}", key_, rank);
}

bool MonitoredBarrier::done() const { return store_.check({key_ + "/done"}); }

std::vector<int> MonitoredBarrier::missing_ranks() const {
  std::vector<int> missing;
  for (int r = 0; r < at_.world_size; ++r) {
    if (!store_.check({arrived_key(r)})) missing.push_back(r);
  }
  return missing;
}

void MonitoredBarrier::arrive() {
  const std::string mine = name_ + "\n" + site_;
  store_.set(arrived_key(at_.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  if (store_.add(key_ + "/count", 1) == at_.world_size) {
    store_.set(key_ + "/done", std::vector<uint8_t>{'1'});
  }
}

void MonitoredBarrier::wait(std::chrono::milliseconds timeout, bool wait_all_ranks,
                            const ProgressReader& progress, const std::function<void()>& flush) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  auto next_exit_check = start + std::chrono::milliseconds(200);
  while (!done()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      if (missing_ranks().empty()) break;  // the last one arrived just now
      flush();
      timed_out(timeout, progress);
    }
    if (!wait_all_ranks && now >= next_exit_check) {
      next_exit_check = now + std::chrono::milliseconds(200);
      check_none_exited(progress);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  check_same_barrier();
}

void MonitoredBarrier::timed_out(std::chrono::milliseconds timeout,
                                 const ProgressReader& progress) {
  const auto missing = missing_ranks();
  const auto records = progress();
  std::vector<std::string> doing;
  for (int r : missing) {
    const auto& p = records[static_cast<std::size_t>(r)];
    doing.push_back(fmt::format("rank {}: {}", r,
                                !p                ? std::string("no progress published")
                                : p->entered == 0 ? std::string("in no collective yet")
                                                  : "last in " + p->last));
  }
  core::raise<TimeoutError>(
      at_,
      "{} did not reach {} within {} s ({}). Every rank must reach the same barriers; a "
      "barrier inside a branch that only some ranks take is the usual cause",
      util::rank_list(missing), what_,
      fmt::format("{:g}", static_cast<double>(timeout.count()) / 1000.0),
      util::join_strings(doing, "; "));
}

void MonitoredBarrier::check_none_exited(const ProgressReader& progress) const {
  const auto missing = missing_ranks();
  const auto records = progress();
  std::vector<int> exited;
  for (int r : missing) {
    const auto& p = records[static_cast<std::size_t>(r)];
    if (p && p->exited) exited.push_back(r);
  }
  if (!exited.empty()) {
    core::raise<PeerError>(at_,
                           "{} exited (destroyed {} process group) without reaching {}; every "
                           "rank must reach the same barriers",
                           util::rank_list(exited), exited.size() == 1 ? "its" : "their", what_);
  }
}

void MonitoredBarrier::check_same_barrier() const {
  std::map<std::string, std::vector<int>> by_name;
  std::vector<std::string> order;  // each barrier's first arrival ("name\nsite"), in rank order
  for (int r = 0; r < at_.world_size; ++r) {
    const auto bytes = store_.get(arrived_key(r));
    const std::string value(bytes.begin(), bytes.end());
    const std::string barrier = value.substr(0, value.find('\n'));
    if (by_name.find(barrier) == by_name.end()) order.push_back(value);
    by_name[barrier].push_back(r);
  }
  if (by_name.size() <= 1) return;
  std::vector<std::string> parts;
  for (const auto& value : order) {
    const auto newline = value.find('\n');
    const std::string barrier = value.substr(0, newline);
    parts.push_back(fmt::format("{} reached monitored_barrier '{}' at {}",
                                util::rank_list(by_name[barrier]), barrier,
                                value.substr(newline + 1)));
  }
  core::raise<CollectiveMismatchError>(at_, "the ranks reached different barriers: {}",
                                       util::join_strings(parts, "; "));
}

}  // namespace rankwise::dist
