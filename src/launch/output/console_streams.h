#pragma once
/// \file console_streams.h
/// Which of a worker's streams reach the launcher's console: torchrun's
/// `--redirects`, `--tee` and `--local-ranks-filter`, and rankwise's
/// `--only-ranks`, decided in one place (console_streams()). The log files
/// (--log-dir) always get both streams of every rank, whatever these say.

#include <string>
#include <vector>

namespace rankwise::launch {
struct LaunchOptions;
}  // namespace rankwise::launch

namespace rankwise::launch::output {

/// Bits of a set of streams, as torchrun's `Std` numbers them: 0 none,
/// 1 stdout, 2 stderr, 3 both.
constexpr unsigned kNoStream = 0;
constexpr unsigned kStdoutBit = 1;
constexpr unsigned kStderrBit = 2;
constexpr unsigned kBothStreams = kStdoutBit | kStderrBit;

/// Parses a `--redirects`/`--tee` value (named `flag` in errors) for
/// `nproc_per_node` local ranks: one digit 0-3 for every local rank ("3"), or
/// LOCAL_RANK:DIGIT pairs ("0:1,1:2"; local ranks not named get 0). Returns
/// one set of streams per local rank. Throws UsageError naming the flag and
/// the value for anything else, a local rank outside [0, nproc_per_node) or
/// one given twice.
std::vector<unsigned> parse_stream_spec(const std::string& text, const char* flag,
                                        int nproc_per_node);

/// The streams of the worker with `local_rank` and global `rank` that reach
/// the console, as torchrun decides them: none when --local-ranks-filter
/// leaves the local rank out; else every stream but those redirected to the
/// log files without --tee; then, with --only-ranks not naming `rank`, no
/// stdout. Missing entries of o.redirects/o.tee count as 0.
unsigned console_streams(const LaunchOptions& o, int local_rank, int rank);

/// True when --redirects or --tee sends some stream to the log files (which
/// then need a directory: --log-dir, else a temporary one, as torchrun).
bool redirects_to_files(const LaunchOptions& o);

}  // namespace rankwise::launch::output
