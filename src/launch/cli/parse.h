#pragma once
/// \file parse.h
/// rankwise-run's command line, parsed and validated into LaunchOptions.
#include <chrono>
#include <optional>
#include <string>

#include "launch/options.h"

namespace rankwise::launch::cli {

/// `s` seconds, given for `flag`, in milliseconds. Throws UsageError naming
/// the flag when `s` is negative, not finite, too large, or 0 where
/// `allow_zero` is false.
std::chrono::milliseconds seconds_to_ms(double s, const char* flag, bool allow_zero);

/// Parses and validates the command line. Returns nullopt when `-h` was given
/// (help already printed). Throws UsageError on bad usage.
std::optional<LaunchOptions> parse_command_line(int argc, char** argv);

/// Resolves `--nproc-per-node`: a positive integer, `cpu` (number of CPU cores),
/// `gpu` (number of visible GPUs; UsageError when none) or `auto` (GPUs if any,
/// else CPU cores). Throws UsageError for anything else or a value < 1.
int resolve_nproc_per_node(const std::string& value);

/// --virtual-local-rank gives worker i the i-th GPU a worker would see: the
/// i-th entry of `cuda_visible_devices` (the launcher's), or GPU i when it is
/// unset. Throws UsageError unless every worker gets one of its own, or,
/// without a driver (`driver_gpus` 0), none does: an invalid or repeated
/// entry, fewer entries than workers (none for "" or -1), or fewer of the
/// driver's GPUs than workers. A no-op without the flag.
void check_virtual_local_rank(const LaunchOptions& o, const std::optional<std::string>& cuda_visible_devices,
                              int driver_gpus);

/// Finds PROGRAM the way execvp would (PATH search when it has no '/').
/// Throws UsageError when it does not exist or is not an executable file.
std::string resolve_program(const std::string& program);

}  // namespace rankwise::launch::cli
