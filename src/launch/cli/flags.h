#pragma once
/// \file flags.h
/// rankwise-run's own flags as CLI11 options: their names (each also with
/// underscores), help text and defaults, and the variables they fill before
/// parse.cpp validates them into LaunchOptions.

#include <optional>
#include <string>

#include "launch/options.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace rankwise::launch::cli {

/// The flags' values as given, before validation turns them into
/// LaunchOptions (flags that set a LaunchOptions field directly are not here).
struct GivenFlags {
  std::string nproc = "1", nnodes = "1";
  std::optional<int> master_port;
  std::string only_ranks, local_ranks_filter, redirects = "0", tee = "0", prefix_template;
  std::string rdzv_backend = "static", rdzv_endpoint, rdzv_conf;
  double monitor_s = 0.1, grace_s = 30.0, rdzv_s = 300.0, hang_s = 300.0, deadlock_s = 10.0;
  bool no_tag = false;
  std::string monitor;  // "" not given; "auto": the flag alone
  double straggler_pct = 20.0, straggler_window_s = 5.0;
  std::string cpu_sched = "inherit";
  // Flags whose validation asks whether they were given.
  CLI::Option* node_rank_flag = nullptr;
  CLI::Option* master_addr_flag = nullptr;
  CLI::Option* master_port_flag = nullptr;
  CLI::Option* rdzv_endpoint_flag = nullptr;
  CLI::Option* tag_flag = nullptr;
  CLI::Option* rdzv_timeout_flag = nullptr;
};

/// Describes `app` (description, usage line, footer, help layout, a flag
/// given twice takes its last value) and adds rankwise-run's flags in the
/// order of the help text, bound to `o` and `g` (which must outlive parsing).
/// torchrun's flags without a rankwise meaning are torchrun_compat.h's.
void add_flags(CLI::App& app, LaunchOptions& o, GivenFlags& g);

}  // namespace rankwise::launch::cli
