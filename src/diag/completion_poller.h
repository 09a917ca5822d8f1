#pragma once
// Ends the flight-recorder entries of collectives whose future cannot say
// when they finished. On CUDA, c10d completes a work's future once its
// kernels are enqueued on the stream (ProcessGroupNCCL), not when they have
// run; a recorder closed by the future would show DDP's all_reduces ended
// at launch, and a rank stuck in one as "not in a collective".
//
// So a thread polls the oldest pending work with a non-blocking query
// (c10d's Work::isCompleted(), which queries the work's CUDA events, as
// c10d's own watchdog does), every `interval` while works are pending and
// not at all otherwise. Works of one process group run on one stream in
// launch order, so a poll stops at the first work still running: `ended`
// callbacks run in launch order, on the poller's thread.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace rankwise::diag {

class CompletionPoller {
 public:
  /// Asks a launched work how it stands: nullopt while it runs, true when it
  /// completed, false when it failed. Must not block.
  using Query = std::function<std::optional<bool>()>;
  /// Told once that the work ended, and whether it completed.
  using Ended = std::function<void(bool ok)>;

  /// The thread starts at the first add().
  explicit CompletionPoller(std::chrono::microseconds interval);
  /// Stops the thread; works still pending are never ended.
  ~CompletionPoller();
  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;

  /// Queues a work launched after every work queued before (any thread).
  void add(Query query, Ended ended);
  /// Polls once on the calling thread: ends the leading works that have
  /// ended, in order, and returns how many.
  std::size_t poll_once();
  /// Works queued and not yet ended.
  std::size_t pending() const;

 private:
  struct Work {
    Query query;
    Ended ended;
  };
  void run();

  const std::chrono::microseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> queue_;
  std::mutex polling_;  // one poll at a time: the thread's or a caller's
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rankwise::diag
