#pragma once
// One save running on a thread of its own while training goes on: what an
// asynchronous save hands its write to. It never communicates; the ranks
// agree on its outcome on the training thread (CheckpointManager::wait).
#include <chrono>
#include <exception>
#include <functional>
#include <stdexcept>
#include <thread>

namespace rankwise::checkpoint::async {

class BackgroundSave {
 public:
  BackgroundSave() = default;
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;
  /// Waits for a save still running (its error, if any, is dropped: call finish() first).
  ~BackgroundSave();

  /// Runs `work` on a new thread. At most one at a time: finish() the
  /// previous one first (a bug otherwise: std::logic_error).
  void start(std::function<void()> work);

  /// Waits for the save started last and rethrows what its work threw. A no-op
  /// when none is in flight. Returns how long it waited.
  std::chrono::duration<double, std::milli> finish();

 private:
  std::thread thread_;
  std::exception_ptr error_;
};

/// Milliseconds from `start` to now (the managers' Timings).
double ms_since(std::chrono::steady_clock::time_point start);

/// A save that failed with nobody left to raise it to (`manager`, e.g.
/// "CheckpointManager", destroyed without wait()): the run must not end as
/// if it had succeeded. Says why on stderr and exits with status 1, so that
/// the launcher names this rank.
[[noreturn]] void exit_unwaited(const std::exception& error, const char* manager);

}  // namespace rankwise::checkpoint::async
