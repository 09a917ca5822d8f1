#pragma once
/// \file cli.h
/// The Fabric's command-line flags, for a program that parses its own with CLI11 (Debian's
/// libcli11-dev; not included by rankwise.h): add_fabric_options(app, options), then
/// RANKWISE_CLI_PARSE(app, argc, argv) and rankwise::Fabric fabric(options).
/// See docs/fabric.md#options-and-flags.

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <string>
#include <system_error>

#include "rankwise/fabric.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::fabric {

/// A CLI11 check that a flag's value is an integer in [lo, hi]: "" when it
/// is, else what is wrong ("'abc' is not an integer in [1, 1048576]").
inline std::function<std::string(const std::string&)> integer_in(int64_t lo, int64_t hi) {
  return [lo, hi](const std::string& value) -> std::string {
    int64_t n = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (error == std::errc() && end == value.data() + value.size() && n >= lo && n <= hi) return "";
    return "'" + value + "' is not an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]";
  };
}

/// A CLI11 check that a flag's value is a number in [lo, hi] (not NaN): ""
/// when it is, else what is wrong ("'abc' is not a number in [0, 1e+06]").
inline std::function<std::string(const std::string&)> number_in(double lo, double hi) {
  return [lo, hi](const std::string& value) -> std::string {
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    if (!value.empty() && end == value.c_str() + value.size() && x >= lo && x <= hi) return "";
    return "'" + value + "' is not a number in [" + fmt::format("{:g}", lo) + ", " +
           fmt::format("{:g}", hi) + "]";
  };
}

/// Adds --progress, --progress-every, --progress-interval, --flops-per-sample
/// and --peak-flops (FabricOptions::progress, flops_per_sample, peak_flops).
inline void add_progress_options(CLI::App& app, FabricOptions& options) {
  app.add_option_function<std::string>(
         "--progress",
         [&options](const std::string& style) {
           options.progress().style(monitor::parse_progress_style(style));
         },
         "progress on rank 0: auto (a bar on a terminal, else lines), bar, lines, off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->default_str("auto");
  app.add_option("--progress-every,--progress_every", options.progress().every_n_steps(),
                 "reduce the progress over ranks every N batches")
      ->check(integer_in(1, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option_function<double>(
         "--progress-interval,--progress_interval",
         [&options](double seconds) {
           options.progress().line_interval(
               std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000 + 0.5)));
         },
         "seconds between progress lines (not on a terminal)")
      ->check(number_in(0, 1e6))
      ->default_str(std::to_string(options.progress().line_interval().count() / 1000));
  app.add_option("--flops-per-sample,--flops_per_sample", options.flops_per_sample(),
                 "FLOPs to train on one sample, for MFU (0: counted for a model of Linear layers)")
      ->check(number_in(0, 1e30))
      ->capture_default_str();
  app.add_option("--peak-flops,--peak_flops", options.peak_flops(),
                 "peak FLOP/s of one device, e.g. 989e12, for MFU (0: the table's for a known GPU, "
                 "else measured)")
      ->check(number_in(0, 1e30))
      ->capture_default_str();
}

/// Adds --strategy, --fsdp-reshard-after-forward and --fsdp-min-unit-params
/// (FabricOptions::strategy, and fsdp's reshard_after_forward and
/// units.min_params).
inline void add_strategy_options(CLI::App& app, FabricOptions& options) {
  app.add_option("--strategy", options.strategy(),
                 "ddp (the model replicated in DistributedDataParallel), zero1 (DDP, and the "
                 "optimizer's state sharded) or fsdp (FullyShardedDataParallel: parameters, "
                 "gradients and optimizer state sharded)")
      ->check([](const std::string& value) { return strategy_option_error(value); })
      ->capture_default_str();
  app.add_option("--fsdp-reshard-after-forward,--fsdp_reshard_after_forward",
                 options.fsdp().reshard_after_forward(),
                 "fsdp: free each unit's gathered parameters after its forward and gather them "
                 "again for backward (true: ZeRO-3), or keep them until backward (false: ZeRO-2)")
      ->check(CLI::IsMember({"true", "false"}))
      ->default_str(options.fsdp().reshard_after_forward() ? "true" : "false");
  app.add_option("--fsdp-min-unit-params,--fsdp_min_unit_params", options.fsdp().units().min_params(),
                 "fsdp: make each submodule that holds at least N parameter elements (not in a "
                 "smaller unit) a unit of its own (0: each child of the outermost Sequential or "
                 "ModuleList)")
      ->check(integer_in(0, int64_t{1} << 50))
      ->capture_default_str();
}

/// Adds --device, --seed, --checkpoint-dir, --checkpoint-every, --keep-last, --resume,
/// --overwrite-checkpoints, --accumulate, --checkpoint-node-local, --checkpoint-async,
/// --metrics-dir, --precision, and add_strategy_options()'s and add_progress_options()'s flags
/// (each also with underscores) to `app`, bound to `options` (whose values are the defaults
/// --help shows). Bad values are CLI11 parse errors that name the flag.
inline void add_fabric_options(CLI::App& app, FabricOptions& options) {
  app.add_option("--device", options.device(),
                 "auto (this rank's own GPU when every rank has one, else the CPU), cpu, cuda "
                 "(a GPU per rank, else an error) or cuda:N (e.g. cuda:0 for ranks sharing one GPU)")
      ->check([](const std::string& value) { return device_option_error(value); })
      ->capture_default_str();
  app.add_option("--seed", options.seed(),
                 "seed of the model initialisation and of the shuffling (the same on every rank)")
      ->check([](const std::string& value) -> std::string {
        uint64_t seed = 0;  // CLI11 would wrap -1 and overflow silently
        const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), seed);
        if (error == std::errc() && end == value.data() + value.size()) return "";
        return "'" + value + "' is not a seed: give an integer in [0, 18446744073709551615]";
      })
      ->capture_default_str();
  app.add_option("--checkpoint-dir,--checkpoint_dir", options.checkpoint_dir(),
                 "directory of the checkpoints (numbered files and a `latest` pointer; empty: none)")
      ->capture_default_str();
  app.add_option("--checkpoint-every,--checkpoint_every", options.checkpoint_every(),
                 "also save every N steps (0: only at epoch ends)")
      ->check(integer_in(0, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--keep-last,--keep_last", options.keep_last(), "checkpoints to keep")
      ->check(integer_in(1, 1000000))
      ->capture_default_str();
  auto* resume = app.add_flag_callback(
      "--resume", [&options] { options.resume(Resume::kLatest); },
      "continue from the latest checkpoint in --checkpoint-dir, if any");
  auto* overwrite = app.add_flag_callback(
      "--overwrite-checkpoints,--overwrite_checkpoints", [&options] { options.resume(Resume::kOverwrite); },
      "without --resume, remove the checkpoints of an earlier run in --checkpoint-dir "
      "(otherwise such a directory is refused)");
  resume->excludes(overwrite);
  app.add_option("--accumulate", options.accumulate(),
                 "accumulate gradients over N batches: the optimizer steps every N-th batch "
                 "(FabricOptions::accumulate)")
      ->check(integer_in(1, int64_t{1} << 20))
      ->capture_default_str();
  app.add_flag("--checkpoint-node-local,--checkpoint_node_local", options.checkpoint_node_local(),
               "--checkpoint-dir is on each node's own disk (not shared): a resume sends rank 0's "
               "checkpoint to the other nodes' ranks");
  app.add_flag("--checkpoint-async,--checkpoint_async", options.checkpoint_async(),
               "save checkpoints in the background: training waits only while rank 0 copies "
               "the state (FabricOptions::checkpoint_async)");
  app.add_option("--metrics-dir,--metrics_dir", options.metrics_dir(),
                 "directory of the run's metrics: metrics.jsonl, metrics.csv and TensorBoard event "
                 "files written by fabric.log() (empty: none)")
      ->capture_default_str();
  app.add_option("--precision", options.precision(),
                 "32-true (float32), bf16-mixed (autocast to bfloat16), 16-mixed (autocast to "
                 "float16 with loss scaling) or bf16-true (a bfloat16 model)")
      ->check([](const std::string& value) { return precision_option_error(value); })
      ->capture_default_str();
  add_strategy_options(app, options);
  add_progress_options(app, options);
}

/// True on the rank that prints --help: global rank 0, by
/// rankwise::dist::rank() (the environment's before init(); an unparsable
/// environment counts as rank 0).
inline bool prints_help() {
  try {
    return ::rankwise::dist::rank() == 0;
  } catch (const std::exception&) {
    return true;
  }
}

/// What CLI11_PARSE's app.exit(error) does, except that --help (and any
/// other request that exits with success) prints on the global rank 0 only
/// (prints_help()): N ranks under a launcher show it once, not N times. A
/// parse error still prints on every rank, so the launcher's summary has the
/// error whichever rank exits first. Returns the exit code for main.
inline int exit_after_parse_error(const CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success) && !prints_help()) {
    return error.get_exit_code();
  }
  return app.exit(error);
}
}  // namespace rankwise::fabric

/// CLI11_PARSE(app, argc, argv) for programs that run as several ranks:
/// --help prints once (see rankwise::fabric::exit_after_parse_error).
#define RANKWISE_CLI_PARSE(app, argc, argv)                         \
  do {                                                              \
    try {                                                           \
      (app).parse((argc), (argv));                                  \
    } catch (const CLI::ParseError& rankwise_parse_error) {         \
      return ::rankwise::fabric::exit_after_parse_error((app), rankwise_parse_error); \
    }                                                               \
  } while (false)
