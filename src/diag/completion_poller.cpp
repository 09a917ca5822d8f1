#include "diag/completion_poller.h"

#include <utility>

namespace rankwise::diag {

CompletionPoller::CompletionPoller(std::chrono::microseconds interval) : interval_(interval) {}

CompletionPoller::~CompletionPoller() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CompletionPoller::add(Query query, Ended ended) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Work{std::move(query), std::move(ended)});
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  wake_.notify_all();
}

std::size_t CompletionPoller::poll_once() {
  std::lock_guard<std::mutex> one_poll(polling_);
  std::size_t ended = 0;
  for (;;) {
    Work* front = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty()) return ended;
      front = &queue_.front();  // stays put: only this poll pops, add() appends
    }
    const std::optional<bool> outcome = front->query();
    if (!outcome) return ended;
    front->ended(*outcome);
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.pop_front();
    ++ended;
  }
}

std::size_t CompletionPoller::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

void CompletionPoller::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (queue_.empty()) {
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      continue;
    }
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    poll_once();
    lock.lock();
  }
}

}  // namespace rankwise::diag
