#pragma once
/// \file run_main.h
/// Runs a worker's main function and reports an uncaught exception so that
/// rankwise-run can show it as the root cause of a failed run.

#include <exception>
#include <functional>
#include <string>

namespace rankwise {

/// Calls `body(argc, argv)` and returns its exit code. If it throws: prints `rankwise: rank R:
/// uncaught exception: ...` to stderr, writes the error file (RANKWISE_ERROR_FILE, set by
/// rankwise-run; see record_error) and returns 1. Any rank. Use:
/// `int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }`.
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

/// Writes `message` to the error file (see run_main), if one is set, as one JSON object
/// {message, rank, secondary, timestamp, timestamp_ns}, stamped at this call; `secondary`: it
/// only says a peer is gone (is_peer_gone), so the launcher names a primary error first.
/// Returns false when no file is set or it cannot be written. Any rank.
/// See docs/launcher.md#failures-and-the-root-cause.
bool record_error(const std::string& message, bool secondary = false);

/// True when `e` only says that a peer rank exited, crashed or closed its connection (a
/// secondary error): rankwise::PeerError, or Gloo's gloo::IoException from c10d calls rankwise
/// does not wrap (a raw c10d read timeout included); by type, no message text is read. Every
/// other rankwise::Error is primary. The one place that decides it (run_main uses it).
bool is_peer_gone(const std::exception& e);

}  // namespace rankwise
