#pragma once
/// \file run_main.h
/// Runs a worker's main function and reports an uncaught exception so that
/// rankwise-run can show it as the root cause of a failed run.

#include <functional>
#include <string>

namespace rankwise {

/// Calls `body(argc, argv)` and returns its exit code. If it throws, the
/// exception's message is printed to stderr as `rankwise: rank R: uncaught
/// exception: ...`, written to the file named by RANKWISE_ERROR_FILE (set by
/// rankwise-run for each worker; torchrun's TORCHELASTIC_ERROR_FILE is
/// honoured too) as JSON `{"message": ..., "rank": R, "timestamp": ...}`, and
/// 1 is returned. Any rank.
///
/// \code
///   int main(int argc, char** argv) {
///     return rankwise::run_main(argc, argv, [](int argc, char** argv) { ...; return 0; });
///   }
/// \endcode
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

/// Writes `message` to the error file (see run_main) if one is configured.
/// Returns false when no error file is set or it cannot be written.
bool record_error(const std::string& message);

}  // namespace rankwise
