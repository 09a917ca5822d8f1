#pragma once
/// \file run_main.h
/// Runs a worker's main function and reports an uncaught exception so that
/// rankwise-run can show it as the root cause of a failed run.

#include <exception>
#include <functional>
#include <string>

namespace rankwise {

/// Calls `body(argc, argv)` and returns its exit code. If it throws, the
/// exception's message is printed to stderr as `rankwise: rank R: uncaught
/// exception: ...`, written to the file named by RANKWISE_ERROR_FILE (set by
/// rankwise-run for each worker; torchrun's TORCHELASTIC_ERROR_FILE is
/// honoured too, see record_error), and 1 is returned. Any rank.
///
/// \code
///   int main(int argc, char** argv) {
///     return rankwise::run_main(argc, argv, [](int argc, char** argv) { ...; return 0; });
///   }
/// \endcode
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

/// Writes `message` to the error file (see run_main) if one is configured, as
/// one JSON object: `{"message": ..., "rank": R, "secondary": bool,
/// "timestamp": <s>, "timestamp_ns": <ns>}`. The timestamps are the wall-clock
/// time of this call (seconds and nanoseconds since the Unix epoch), i.e. when
/// the error was caught, not when the process exits. `secondary` marks an error
/// that only says a peer rank is gone (see is_peer_gone): rankwise-run's summary
/// names a primary error as the root cause before it, whatever their times.
/// Returns false when no error file is set or it cannot be written. Any rank.
bool record_error(const std::string& message, bool secondary = false);

/// True when `e` only says that a peer rank exited, crashed or closed its
/// connection: a secondary error, whose cause is in that peer's output. The
/// one place that decides it (run_main uses it for the error file):
///  - rankwise::PeerError, by its type (what rankwise's collectives and
///    DistributedDataParallel throw when a peer is gone); every other
///    rankwise::Error (TimeoutError, ...) is primary;
///  - Gloo's gloo::IoException, by its type: it reaches run_main unwrapped
///    from c10d calls rankwise does not wrap (e.g. the gradient all_reduce of
///    a backward pass) when a peer's connection closed or reset, or a read
///    from a peer timed out (Gloo throws the same type for both, so a raw
///    c10d timeout counts as secondary too; rankwise's own collectives raise
///    TimeoutError instead). No message text is read.
bool is_peer_gone(const std::exception& e);

}  // namespace rankwise
