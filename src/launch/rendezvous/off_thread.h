#pragma once
/// \file off_thread.h
/// Store calls the launcher waits for without waiting inside them: libtorch
/// 1.13's TCPStore server blocks on any client that sent half a message, and
/// every other call waits with it (for the client's whole timeout), so the
/// launcher runs them on a thread of its own and keeps answering signals.

#include <atomic>
#include <chrono>
#include <functional>

namespace rankwise::launch::rendezvous {

/// How run_off_thread() stopped waiting.
enum class Waited { kDone, kInterrupted, kDeadline };

/// Runs `work` on a thread of its own and waits for it, polling
/// `interrupted` every 100 ms, at most until `deadline`. Returns kDone when
/// `work` ended (rethrowing what it threw), else why it stopped waiting; the
/// thread is then told to stop (`cancel`) and left to end, or to stay
/// blocked, on its own: `work` must own (share) everything it uses.
Waited run_off_thread(std::function<void(const std::atomic<bool>& cancel)> work,
                      std::chrono::steady_clock::time_point deadline,
                      const std::function<bool()>& interrupted);

}  // namespace rankwise::launch::rendezvous
