#pragma once
/// \file fabric_cli.h
/// The Fabric's command-line flags, for a program that parses its own with
/// CLI11 (needs CLI11, Debian's libcli11-dev; not included by rankwise.h):
///
/// \code
///   CLI::App app{"my trainer"};
///   rankwise::FabricOptions options;
///   rankwise::add_fabric_options(app, options);
///   app.add_option("--epochs", epochs);
///   CLI11_PARSE(app, argc, argv);
///   rankwise::Fabric fabric(options);
/// \endcode

#include <CLI/CLI.hpp>

#include <cstdint>

#include "rankwise/fabric.h"

namespace rankwise {

/// Adds --device, --seed, --checkpoint-dir, --checkpoint-every, --keep-last,
/// --resume and --overwrite-checkpoints to `app` (each also with
/// underscores, as rankwise-run and torchrun accept), bound to `options`
/// (whose current values are the defaults shown by --help). Bad values are
/// CLI11 parse errors that name the flag.
inline void add_fabric_options(CLI::App& app, FabricOptions& options) {
  app.add_option("--device", options.device(),
                 "auto (this rank's own GPU when every rank has one, else the CPU), cpu, cuda "
                 "(a GPU per rank, else an error) or cuda:N (e.g. cuda:0 for ranks sharing one GPU)")
      ->check([](const std::string& value) { return device_option_error(value); })
      ->capture_default_str();
  app.add_option("--seed", options.seed(),
                 "seed of the model initialisation and of the shuffling (the same on every rank)")
      ->capture_default_str();
  app.add_option("--checkpoint-dir,--checkpoint_dir", options.checkpoint_dir(),
                 "directory of the checkpoints (numbered files and a `latest` pointer; empty: none)")
      ->capture_default_str();
  app.add_option("--checkpoint-every,--checkpoint_every", options.checkpoint_every(),
                 "also save every N steps (0: only at epoch ends)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--keep-last,--keep_last", options.keep_last(), "checkpoints to keep")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  auto* resume = app.add_flag_callback(
      "--resume", [&options] { options.resume(Resume::kLatest); },
      "continue from the latest checkpoint in --checkpoint-dir, if any");
  auto* overwrite = app.add_flag_callback(
      "--overwrite-checkpoints,--overwrite_checkpoints", [&options] { options.resume(Resume::kOverwrite); },
      "without --resume, remove the checkpoints of an earlier run in --checkpoint-dir "
      "(otherwise such a directory is refused)");
  resume->excludes(overwrite);
}

}  // namespace rankwise
