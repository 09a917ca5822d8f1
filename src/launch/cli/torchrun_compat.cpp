#include "launch/cli/torchrun_compat.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "util/text.h"
#include "launch/options.h"

namespace rankwise::launch::cli {

namespace {

// A torchrun flag rankwise-run refuses, and what to say about it.
struct Refused {
  const char* names;  // CLI11 names: dashes, then underscores
  bool takes_value;
  const char* why_and_instead;
};

const Refused kRefused[] = {
    {"-m,--module", false,
     "rankwise-run runs programs, not Python modules; run the module through Python: "
     "rankwise-run [options] python -m MODULE [ARGS...] (or use torchrun -m)"},
    {"--run-path,--run_path", false,
     "rankwise-run starts every worker as a program of its own, not inside the launcher's "
     "interpreter; run the script through Python: rankwise-run [options] python SCRIPT [ARGS...]"},
    {"--local-addr,--local_addr", true,
     "rankwise-run's workers find each other through the store at --master-addr (or "
     "--rdzv-endpoint); to choose the network interface of their Gloo traffic, give --iface IF"},
    {"--logs-specs,--logs_specs", true,
     "rankwise-run has no logging plugins; use --log-dir, --redirects, --tee and "
     "--local-ranks-filter"},
    {"--duplicate-stdout-filters,--duplicate_stdout_filters", true,
     "rankwise-run keeps every rank's whole stdout and stderr with --log-dir DIR "
     "(DIR/attempt_<n>/rank_<r>.stdout|.stderr); filter those files, e.g. grep -h WORD "
     "DIR/attempt_0/*.stdout"},
    {"--duplicate-stderr-filters,--duplicate_stderr_filters", true,
     "rankwise-run keeps every rank's whole stdout and stderr with --log-dir DIR "
     "(DIR/attempt_<n>/rank_<r>.stdout|.stderr); filter those files, e.g. grep -h WORD "
     "DIR/attempt_0/*.stderr"},
    {"--numa-binding,--numa_binding", true,
     "rankwise-run does not bind workers to NUMA nodes; start PROGRAM through numactl from a "
     "wrapper script that picks the node from $LOCAL_RANK (exec numactl --cpunodebind=N "
     "--membind=N PROGRAM)"},
    {"--print-completion,--print_completion", true,
     "rankwise-run has no shell completion script; rankwise-run -h lists its flags"},
};

// The signals rankwise-run forwards to every worker (signals.cpp), which are
// torchrun's default --signals-to-handle.
const std::set<std::string> kForwarded = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"};

struct Values {
  std::vector<std::string> refused_values = std::vector<std::string>(std::size(kRefused));
  std::vector<CLI::Option*> refused_options;
  bool no_python = false;
  std::string start_method = "spawn";
  std::string event_log_handler = "null";
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
};

// torchrun's argparse names (dest) whose values come from PET_<DEST> when not
// given (torch/distributed/argparse_util.py's env and check_env actions).
const std::set<std::string> kEnvironmentDests = {
    "nnodes",        "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id",
    "rdzv_conf",     "standalone",     "max_restarts", "monitor_interval", "role",
    "log_dir",       "redirects",      "tee",          "local_ranks_filter", "node_rank",
    "master_addr",   "master_port",    "no_python",    "start_method",  "shutdown_timeout",
    "event_log_handler", "signals_to_handle", "virtual_local_rank"};

}  // namespace

void read_torchrun_environment_defaults(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    for (std::string name : option->get_lnames()) {
      std::replace(name.begin(), name.end(), '-', '_');
      if (name == "log_line_prefix_template") {
        option->envname("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
        break;
      }
      if (kEnvironmentDests.count(name) == 0) continue;
      std::string variable = "PET_" + name;
      std::transform(variable.begin(), variable.end(), variable.begin(),
                     [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
      option->envname(variable);
      break;
    }
  }
}

std::function<void()> add_torchrun_only_flags(CLI::App& app) {
  auto v = std::make_shared<Values>();
  // Accepted without effect.
  app.add_flag("--no-python,--no_python", v->no_python,
               "Accepted for torchrun's command lines; no effect: rankwise-run always runs "
               "PROGRAM itself");
  // torchrun starts a program the same way whichever is given.
  app.add_option("--start-method,--start_method", v->start_method,
                 "Accepted for torchrun's command lines (spawn, fork or forkserver); no effect: "
                 "every worker is a program of its own. E.g. --start-method spawn");
  app.add_option("--event-log-handler,--event_log_handler", v->event_log_handler,
                 "torchrun's event handler: only null (its default) is accepted; the failure "
                 "summary and --log-dir record what happened. E.g. --event-log-handler null");
  app.add_option("--signals-to-handle,--signals_to_handle", v->signals_to_handle,
                 "Signals forwarded to every worker: SIGTERM, SIGINT, SIGHUP and SIGQUIT always "
                 "are; naming others is an error. E.g. --signals-to-handle SIGTERM,SIGINT");
  for (std::size_t i = 0; i < std::size(kRefused); ++i) {
    CLI::Option* option = kRefused[i].takes_value
                              ? app.add_option(kRefused[i].names, v->refused_values[i])
                              : app.add_flag(kRefused[i].names);
    v->refused_options.push_back(option->group(""));
  }
  return [v] {
    for (std::size_t i = 0; i < std::size(kRefused); ++i) {
      if (v->refused_options[i]->count() == 0) continue;
      const std::string names = kRefused[i].names;
      const std::string flag = names.substr(0, names.find(','));
      const std::string shown = flag == "-m" ? "-m/--module" : flag;
      throw UsageError(fmt::format("{}: not supported: {}", shown, kRefused[i].why_and_instead));
    }
    if (v->start_method != "spawn" && v->start_method != "fork" &&
        v->start_method != "forkserver") {
      throw UsageError(fmt::format(
          "--start-method '{}': give spawn, fork or forkserver (it has no effect: rankwise-run "
          "starts every worker as a program, with fork and exec)",
          v->start_method));
    }
    if (v->event_log_handler != "null") {
      throw UsageError(fmt::format(
          "--event-log-handler '{}': not supported: rankwise-run has no event log handlers; its "
          "failure summary and the --log-dir files record what happened (only 'null', "
          "torchrun's default, is accepted)",
          v->event_log_handler));
    }
    for (const std::string& name : rankwise::util::split_list(v->signals_to_handle)) {
      if (kForwarded.count(name) == 0) {
        throw UsageError(fmt::format(
            "--signals-to-handle '{}': {} not supported: rankwise-run forwards SIGINT, SIGTERM, "
            "SIGHUP and SIGQUIT to every worker, and no other signal; have the scheduler send one "
            "of those (Slurm: --signal=TERM@120)",
            v->signals_to_handle,
            name.empty() ? std::string("an empty entry is") : fmt::format("{} is", name)));
      }
    }
  };
}

}  // namespace rankwise::launch::cli
