#pragma once
/// \file error_file.h
/// A worker's error file (RANKWISE_ERROR_FILE): what rankwise::run_main (or
/// the program itself) wrote there when it failed.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace rankwise::wire {

/// The error a worker reported.
struct WorkerError {
  std::string path;        ///< the error file
  std::string message;     ///< "message"; the file's whole text when it is not JSON with one
  bool secondary = false;  ///< "secondary": it only says a peer is gone (rankwise::is_peer_gone)
  std::optional<int> rank;  ///< "rank", when the file gives it
  /// When the error happened, on the launcher's steady clock: from the file's
  /// "timestamp_ns" (wall clock, ns since the epoch), else its "timestamp" (s;
  /// also torchelastic's "message": {"extraInfo": {"timestamp": ...}}), else
  /// `written` (the file's modification time).
  std::chrono::steady_clock::time_point time;
};

/// The environment variables naming a worker's error file: rankwise-run's,
/// then torchelastic's (torchrun), which a worker also honours.
constexpr const char* kErrorFileVariable = "RANKWISE_ERROR_FILE";
constexpr const char* kTorchelasticErrorFileVariable = "TORCHELASTIC_ERROR_FILE";

/// fmt format of the stderr line rankwise::run_main writes for an uncaught
/// exception (rank, message); rankwise-run's summary recognises it so as not
/// to repeat the message it already shows.
constexpr const char* kUncaughtExceptionFormat = "rankwise: rank {}: uncaught exception: {}";

/// The rank whose error `message` repeats, when it says so as rankwise's
/// collective decisions do: "(raised on rank R, which decides)", "(raised on
/// rank R, which reads first)", "(rank R's error, raised on rank N)". Such
/// an error is every rank's, and R's is the root cause.
std::optional<int> echoed_rank(const std::string& message);

/// The JSON text rankwise::record_error writes for rank `rank`: {"message",
/// "rank", "secondary", "timestamp" (s), "timestamp_ns"} at `when`.
std::string encode_worker_error(const std::string& message, int rank, bool secondary,
                                std::chrono::system_clock::time_point when);

/// Parses the text of an error file as rankwise::record_error writes it
/// (`{"message", "rank", "secondary", "timestamp", "timestamp_ns"}`), or as
/// torchelastic does (`{"message": {"message": ..., "extraInfo": {"timestamp": ...}}}`);
/// any other text is the message itself, primary, at `written`.
WorkerError parse_worker_error(const std::string& text,
                               std::chrono::steady_clock::time_point written);

/// Reads and parses the error file at `path` (at most `max_bytes` of it);
/// nullopt when there is none.
std::optional<WorkerError> read_worker_error(const std::string& path,
                                             std::size_t max_bytes = 16 * 1024);

}  // namespace rankwise::wire
