// Command line of rankwise-run (CLI11): flags, help text and validation.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <tuple>

#include "util/interface_list.h"
#include "launch/workers/cpu_sched.h"
#include "launch/workers/visible_devices.h"
#include "launch/cli/index_list.h"
#include "launch/output/console_streams.h"
#include "launch/cli/parse.h"
#include "launch/cli/rdzv_flags.h"
#include "launch/output/tag_template.h"
#include "launch/cli/torchrun_compat.h"

namespace rankwise::launch::cli {

namespace {

constexpr const char* kDescription =
    "rankwise-run: start N copies of PROGRAM on this node for multi-process data-parallel\n"
    "training (torchrun-compatible environment), host the rendezvous store, tag and merge\n"
    "their output line by line, and stop every worker when one fails.\n";

constexpr const char* kFooter = R"(
Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT, RANKWISE_RESTART_COUNT (= TORCHELASTIC_RESTART_COUNT), TORCHELASTIC_RUN_ID,
RANKWISE_AGENT_STORE=1 (the launcher hosts the TCPStore; workers connect as clients),
RANKWISE_ERROR_FILE (where a failing worker may write its error), OMP_NUM_THREADS=1
unless set, ROLE_NAME (--role), and GLOO_SOCKET_IFNAME with --iface. Every flag with a dash
is also accepted with an underscore (--nproc_per_node).

torchrun's command lines work unchanged; its flags without a rankwise meaning are accepted
without effect (--no-python, --start-method) or refused with what to use instead (-m,
--run-path, --numa-binding, --local-addr, ...): docs/launcher.md lists them all.

Exit codes: 0 every worker succeeded; 1 a worker failed (the summary names the root
cause: rank, exit code or signal, its error, last lines of stderr), or the job could not
start or go on (rendezvous timed out, store lost); 2 bad usage or configuration; 128+n
the launcher got signal n (forwarded to every worker).

torchrun's environment defaults are read: PET_NNODES, PET_NPROC_PER_NODE, PET_RDZV_ENDPOINT,
... (PET_ and the flag's name with underscores, in capitals); the command line wins.

Examples:
  rankwise-run --nproc-per-node 4 ./train --epochs 3
  rankwise-run --nproc-per-node 2 --tag '[{rank}/{world_size}] ' --only-ranks 0 ./train
  rankwise-run --nproc-per-node 2 --log-dir logs --max-restarts 2 ./train
  node 0: rankwise-run --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 \
            --nproc-per-node 8 ./train
  node 1: rankwise-run --nnodes 2 --node-rank 1 --master-addr node0 --master-port 29500 \
            --nproc-per-node 8 --iface eth1 ./train
  every node (torchrun's line; node ranks by arrival): rankwise-run --nnodes 2 \
            --nproc-per-node 8 --rdzv-id $JOB --rdzv-backend c10d \
            --rdzv-endpoint node0:29400 ./train
  rankwise-run --nproc-per-node 4 --tee 3 --local-ranks-filter 0 --log-dir logs ./train
  rankwise-run --nproc-per-node 4 --monitor ./train    (live per-rank table, stragglers)
)";

}  // namespace

std::chrono::milliseconds seconds_to_ms(double s, const char* flag, bool allow_zero) {
  if (!std::isfinite(s) || s < 0 || (!allow_zero && s == 0)) {
    throw UsageError(fmt::format("{} {}: must be {} seconds", flag, s,
                                 allow_zero ? "zero or more" : "a positive number of"));
  }
  // Beyond this, milliseconds and the clocks' nanoseconds would overflow.
  constexpr double kMaxSeconds = 1e9;  // about 31 years
  if (s > kMaxSeconds) {
    throw UsageError(fmt::format("{} {}: too large; the most is {} seconds", flag, s, kMaxSeconds));
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000.0)));
}

namespace {

// --nnodes N, or torchrun's MIN:MAX (elastic when MIN < MAX): {MIN, MAX}.
std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto number = [&](const std::string& part) {
    const auto n = decimal(part);
    if (!n || *n > 1000000) {
      throw UsageError(fmt::format(
          "--nnodes '{}': expected a number of nodes or a range MIN:MAX, e.g. --nnodes 2 or "
          "--nnodes 1:4",
          text));
    }
    if (*n < 1) throw UsageError(fmt::format("--nnodes {}: must be at least 1", text));
    return static_cast<int>(*n);
  };
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    const int n = number(text);
    return {n, n};
  }
  const int min = number(text.substr(0, colon)), max = number(text.substr(colon + 1));
  if (min > max) {
    throw UsageError(fmt::format("--nnodes {}: MIN {} is above MAX {}; e.g. --nnodes {}:{}", text,
                                 min, max, max, min));
  }
  return {min, max};
}

// CLI11 cannot describe the pass-through PROGRAM [ARGS...] in its usage line.
class LauncherFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] PROGRAM [ARGS...]\n"
           "  Options end at PROGRAM; everything after it is passed to PROGRAM unchanged.\n";
  }
  // A flag with an optional value shows as --flag[=VALUE], not CLI11's --flag{default}.
  std::string make_option_name(const CLI::Option* option, bool positional) const override {
    if (option->get_name() == "--monitor") return "--monitor[=SECONDS]";
    return CLI::Formatter::make_option_name(option, positional);
  }
};

}  // namespace

int resolve_nproc_per_node(const std::string& value) {
  if (value == "cpu") return workers::cpu_core_count();
  if (value == "gpu" || value == "auto") {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    const int gpus = workers::visible_gpu_count(cvd ? std::optional<std::string>(cvd) : std::nullopt);
    if (value == "auto") return gpus > 0 ? gpus : workers::cpu_core_count();
    if (gpus == 0) {
      throw UsageError(
          "--nproc-per-node gpu: no GPU is visible (no NVIDIA driver in /proc/driver/nvidia/gpus, "
          "or CUDA_VISIBLE_DEVICES hides them); give a number, or cpu/auto");
    }
    return gpus;
  }
  const auto parsed = decimal(value);
  if (!parsed) {
    throw UsageError(fmt::format(
        "--nproc-per-node '{}': expected a positive integer, cpu, gpu or auto", value));
  }
  const long n = *parsed;
  if (n < 1 || n > 4096) {
    throw UsageError(fmt::format(
        "--nproc-per-node {}: must be at least 1 (and at most 4096); e.g. --nproc-per-node 2", n));
  }
  return static_cast<int>(n);
}

std::string resolve_program(const std::string& program) {
  auto is_executable_file = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(program.c_str(), &st) != 0) {
      throw UsageError(fmt::format("program '{}' not found; check the path", program));
    }
    if (!is_executable_file(program)) {
      throw UsageError(fmt::format(
          "program '{}' is not an executable file; build it or chmod +x it", program));
    }
    return program;
  }
  const char* path_env = std::getenv("PATH");
  std::stringstream ss(path_env ? path_env : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
  }
  throw UsageError(fmt::format(
      "program '{}' not found in PATH; give its path (e.g. ./{}) or add its directory to PATH",
      program, program));
}

std::optional<LaunchOptions> parse_command_line(int argc, char** argv) {
  LaunchOptions o;
  CLI::App app(kDescription, "rankwise-run");
  app.prefix_command();  // options end at PROGRAM; the rest belongs to it
  app.footer(kFooter);
  app.formatter(std::make_shared<LauncherFormatter>());
  app.get_formatter()->column_width(34);
  // A flag given twice takes its last value, as with torchrun's argparse.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  std::string nproc = "1", nnodes = "1";
  std::optional<int> master_port;
  std::string only_ranks, local_ranks_filter, redirects = "0", tee = "0", prefix_template;
  std::string rdzv_backend = "static", rdzv_endpoint, rdzv_conf;
  double monitor_s = 0.1, grace_s = 5.0, rdzv_s = 300.0, hang_s = 300.0;
  bool no_tag = false;

  app.add_option("--nproc-per-node,--nproc_per_node", nproc,
                 "Workers on this node: N >= 1, cpu (one per CPU core), gpu (one per visible "
                 "GPU) or auto (gpu if any, else cpu). Default 1. E.g. --nproc-per-node 4");
  app.add_option("--nnodes", nnodes,
                 "Number of nodes (default 1), or an elastic range MIN:MAX (needs "
                 "--rdzv-backend c10d: the job runs in rounds of MIN to MAX nodes, and starts a "
                 "new round when a node joins or leaves). E.g. --nnodes 2, --nnodes 1:4");
  CLI::Option* node_rank_flag = app.add_option(
      "--node-rank,--node_rank", o.node_rank,
      "Index of this node in [0, nnodes) (default 0; with --rdzv-backend c10d, default: node 0 "
      "is the node that hosts the store, the others are numbered as they join). "
      "E.g. --node-rank 1");
  CLI::Option* master_addr_flag = app.add_option(
      "--master-addr,--master_addr", o.master_addr,
      "Host of node 0, which hosts the rendezvous store (default 127.0.0.1; IPv6 as [fd00::1]). "
      "E.g. --master-addr node0");
  CLI::Option* master_port_flag = app.add_option("--master-port,--master_port", master_port,
                 "Port of the rendezvous store; default: a free port (single node only; "
                 "required with --nnodes > 1). E.g. --master-port 29500");
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend,
                 "torchrun's rendezvous backend: static (the default) or c10d, both rankwise's "
                 "store hosted by node 0's launcher; c10d also numbers the nodes when "
                 "--node-rank is not given. E.g. --rdzv-backend c10d");
  CLI::Option* rdzv_endpoint_flag = app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                 "HOST[:PORT] of the rendezvous store, the same as --master-addr HOST "
                 "--master-port PORT (default port 29400; :0 a free port, one node only). "
                 "E.g. --rdzv-endpoint node0:29400");
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "Rendezvous settings key=value,...: join_timeout=S (= --rendezvous-timeout), "
                 "read_timeout=S (connecting to the store and each store call; default: the "
                 "rendezvous timeout), is_host=1|0 (whether this node hosts the store), "
                 "last_call_timeout=S (elastic --nnodes MIN:MAX: how long a round stays open "
                 "for more nodes once MIN have joined; default 30). E.g. --rdzv-conf "
                 "join_timeout=600,last_call_timeout=10");
  app.add_flag("--standalone", o.standalone,
               "Single node with a local store on a free port (like torchrun --standalone)");
  CLI::Option* tag_flag = app.add_option(
      "--tag", o.tag,
      "Prefix of every output line; placeholders {rank} {local_rank} {node_rank} "
      "{world_size} {host} (default '[rank{rank}]: '). E.g. --tag '{host}:{rank}| '");
  app.add_option("--log-line-prefix-template,--log_line_prefix_template", prefix_template,
                 "torchrun's spelling of --tag: ${rank} ${local_rank} ${hostname} ${role_name}; "
                 "it prefixes every line, tee'd or not. E.g. "
                 "--log-line-prefix-template '${hostname}:${rank}: '");
  app.add_flag("--no-tag,--no_tag", no_tag, "Do not tag output lines");
  app.add_option("--only-ranks,--only_ranks", only_ranks,
                 "Show only these ranks' stdout (stderr is always shown). E.g. --only-ranks 0,3");
  app.add_option("--local-ranks-filter,--local_ranks_filter", local_ranks_filter,
                 "Show only these local ranks' output, stdout and stderr, on the console (the "
                 "log files keep every rank's). E.g. --local-ranks-filter 0");
  app.add_option("-r,--redirects", redirects,
                 "Streams that go to the log files instead of the console: 0 none, 1 stdout, "
                 "2 stderr, 3 both, for every local rank or per local rank (0:3,1:2); without "
                 "--log-dir the files go to a new temporary directory. E.g. --redirects 3");
  app.add_option("-t,--tee", tee,
                 "Streams that go to the console and the log files (same values as "
                 "--redirects). E.g. --tee 3");
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "Write each rank's full stdout and stderr to "
                 "DIR/attempt_<n>/rank_<r>.stdout|.stderr, whatever --redirects and --tee say. "
                 "E.g. --log-dir logs");
  app.add_flag("--group-by-rank,--group_by_rank", o.group_by_rank,
               "Print each rank's output as one block, in rank order, when the workers end");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "Restart all workers up to K times after a failure (default 0). "
                 "E.g. --max-restarts 2");
  app.add_option("--monitor-interval,--monitor_interval", monitor_s,
                 "Longest wait in seconds between checks of the workers (default 0.1; exits "
                 "and signals are seen at once anyway). E.g. --monitor-interval 1");
  app.add_option("--run-id,--run_id,--rdzv-id,--rdzv_id", o.run_id,
                 "Job id, passed as TORCHELASTIC_RUN_ID (default none); on several nodes every "
                 "node must give the same (a node of another job is refused, naming both). "
                 "E.g. --rdzv-id job42");
  app.add_option("--role", o.role,
                 "Role of the workers, passed as ROLE_NAME (default 'default'). "
                 "E.g. --role trainer");
  app.add_option("--grace-period,--grace_period,--shutdown-timeout,--shutdown_timeout", grace_s,
                 "Seconds between SIGTERM and SIGKILL when stopping workers (default 5; "
                 "--shutdown-timeout is torchrun's name). E.g. --grace-period 10");
  CLI::Option* rdzv_timeout_flag = app.add_option(
      "--rendezvous-timeout,--rendezvous_timeout", rdzv_s,
      "Seconds to wait for every node to join (default 300). E.g. --rendezvous-timeout 60");

  app.add_option("--hang-timeout,--hang_timeout", hang_s,
                 "Seconds after which a job whose ranks all wait in collectives, are stopped "
                 "or have ended, with no collective completed, is a hang: print each rank's "
                 "last collective and its threads' stacks, then stop the job (default 300; 0: "
                 "off). A rank working outside collectives is never a hang. E.g. "
                 "--hang-timeout 60");

  std::string monitor;  // "" not given; "auto": the flag alone
  double straggler_pct = 20.0, straggler_window_s = 5.0;
  app.add_flag("--monitor{auto}", monitor,
               "Show a live table of every rank's heartbeat (step, samples/s, compute and wait "
               "ms per step, loss, memory, heartbeat age, state) on stderr, redrawn in place on "
               "a terminal every SECONDS (default 1), else printed every SECONDS (default 30); "
               "name stragglers and stalled ranks as they start and end. Give SECONDS with '='. "
               "E.g. --monitor=5");
  app.add_option("--straggler-threshold,--straggler_threshold", straggler_pct,
                 "With --monitor: a rank whose compute time per step is more than this many "
                 "percent over the median of the ranks (and at least 2 ms over it) for "
                 "--straggler-window seconds is a straggler (default 20). "
                 "E.g. --straggler-threshold 50");
  app.add_option("--straggler-window,--straggler_window", straggler_window_s,
                 "With --monitor: seconds a rank must stay over the straggler threshold before "
                 "it is named (default 5). E.g. --straggler-window 10");

  std::string cpu_sched = "inherit";
  app.add_option("--cpu-sched,--cpu_sched", cpu_sched,
                 "Linux scheduling policy of every worker and all its threads: inherit (the "
                 "default: the launcher's own), normal (SCHED_OTHER), batch (SCHED_BATCH: no "
                 "wake-up preemption; Gloo all_reduces of small tensors took 3x less time on an "
                 "idle 2-core machine, much more under other load, see BENCHMARKS.md) or idle "
                 "(SCHED_IDLE). None needs privileges. E.g. --cpu-sched batch");
  app.add_option("--iface", o.iface,
                 "Network interface(s) for the workers' Gloo traffic, comma-separated; sets "
                 "GLOO_SOCKET_IFNAME for every worker (default: the interface that routes to "
                 "--master-addr). E.g. --iface eth1");
  const std::function<void()> check_torchrun_only = add_torchrun_only_flags(app);
  read_torchrun_environment_defaults(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  check_torchrun_only();

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) {
    throw UsageError("no PROGRAM given; usage: rankwise-run [options] PROGRAM [ARGS...], "
                     "e.g. rankwise-run --nproc-per-node 2 ./train");
  }
  if (rest.front().size() > 1 && rest.front()[0] == '-') {
    throw UsageError(fmt::format("unknown option '{}'; see rankwise-run -h", rest.front()));
  }

  o.nproc_per_node = resolve_nproc_per_node(nproc);
  std::tie(o.min_nnodes, o.nnodes) = parse_nnodes(nnodes);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    throw UsageError(fmt::format("--node-rank {}: must be in [0, {}) (--nnodes {})", o.node_rank,
                                 o.nnodes, o.nnodes));
  }
  if (o.standalone && o.nnodes > 1) {
    throw UsageError("--standalone runs a single node; drop --standalone or --nnodes");
  }
  if (master_port && (*master_port < 1 || *master_port > 65535)) {
    throw UsageError(fmt::format("--master-port {}: must be in [1, 65535]", *master_port));
  }
  o.rdzv_backend = parse_rdzv_backend(rdzv_backend);
  o.master_addr = without_brackets(o.master_addr);
  if (!rdzv_endpoint.empty()) {
    const Endpoint e = parse_endpoint(rdzv_endpoint);
    const int port = e.port.value_or(kDefaultRdzvPort);
    if (master_addr_flag->count() > 0 && o.master_addr != e.host) {
      throw UsageError(fmt::format(
          "--rdzv-endpoint '{}' and --master-addr '{}' name different hosts for the store; give "
          "one of them",
          rdzv_endpoint, o.master_addr));
    }
    if (master_port && *master_port != port) {
      throw UsageError(fmt::format(
          "--rdzv-endpoint '{}' and --master-port {} name different ports for the store; give "
          "one of them",
          rdzv_endpoint, *master_port));
    }
    if (port == 0 && o.nnodes > 1) {
      throw UsageError(fmt::format(
          "--rdzv-endpoint '{}': port 0 (a free port) works on one node only; with --nnodes {} "
          "give the port every node uses, e.g. --rdzv-endpoint {}:{}",
          rdzv_endpoint, o.nnodes, e.host, kDefaultRdzvPort));
    }
    o.master_addr = e.host;
    master_port = port;
    if (port == 0) master_port.reset();
  }
  if (o.nnodes > 1 && !master_port) {
    throw UsageError(fmt::format(
        "--nnodes {} needs --master-port (and --master-addr, node 0's host), or --rdzv-endpoint "
        "HOST:PORT, so that every node finds the same store; e.g. --master-addr node0 "
        "--master-port 29500",
        o.nnodes));
  }
  if (o.standalone) {
    // As torchrun, --standalone overrides where the store is; say so.
    for (const CLI::Option* given : {rdzv_endpoint_flag, master_addr_flag, master_port_flag}) {
      if (given->count() == 0) continue;
      o.notices.push_back(fmt::format(
          "--standalone: ignoring {} '{}': a standalone job's store is on 127.0.0.1 at a free "
          "port (drop --standalone to use it)",
          given->get_name(), given->as<std::string>()));
    }
    o.master_addr = "127.0.0.1";
    master_port.reset();
  }
  o.master_port = master_port;
  if (o.master_addr.empty()) throw UsageError("--master-addr: must not be empty");
  if (o.max_restarts < 0) {
    throw UsageError(fmt::format("--max-restarts {}: must be 0 or more", o.max_restarts));
  }
  o.monitor_interval = seconds_to_ms(monitor_s, "--monitor-interval", false);
  if (o.monitor_interval.count() == 0) o.monitor_interval = std::chrono::milliseconds(1);
  o.grace_period = seconds_to_ms(grace_s, "--grace-period", true);
  o.rendezvous_timeout = seconds_to_ms(rdzv_s, "--rendezvous-timeout", false);
  o.hang_timeout = seconds_to_ms(hang_s, "--hang-timeout", true);
  if (!monitor.empty()) {
    if (monitor == "auto") {
      o.monitor = std::chrono::milliseconds(0);
    } else {
      char* end = nullptr;
      const double seconds = std::strtod(monitor.c_str(), &end);
      if (end == monitor.c_str() || *end != '\0') {
        throw UsageError(fmt::format("--monitor={}: expected a number of seconds; e.g. --monitor=5",
                                     monitor));
      }
      o.monitor = seconds_to_ms(seconds, "--monitor", false);
    }
  }
  if (!(straggler_pct > 0 && straggler_pct <= 100000)) {
    throw UsageError(fmt::format(
        "--straggler-threshold {}: expected a percentage above 0; e.g. --straggler-threshold 20",
        straggler_pct));
  }
  o.straggler_threshold = straggler_pct / 100.0;
  o.straggler_window = seconds_to_ms(straggler_window_s, "--straggler-window", false);

  const RdzvConf conf = parse_rdzv_conf(rdzv_conf);
  if (conf.join_timeout) {
    if (rdzv_timeout_flag->count() > 0 && *conf.join_timeout != o.rendezvous_timeout) {
      throw UsageError(fmt::format(
          "--rdzv-conf join_timeout={} and --rendezvous-timeout {} disagree; give one of them",
          conf.join_timeout->count() / 1000.0, rdzv_s));
    }
    o.rendezvous_timeout = *conf.join_timeout;
  }
  o.store_timeout = conf.read_timeout;
  o.is_host = conf.is_host;
  if (conf.last_call_timeout) o.last_call_timeout = *conf.last_call_timeout;
  if (o.elastic()) {
    // torchrun's static backend has a fixed membership (it takes MAX and
    // needs --node-rank); a range needs the dynamic one.
    if (o.rdzv_backend != RdzvBackend::kC10d) {
      throw UsageError(fmt::format(
          "--nnodes {}: an elastic range needs --rdzv-backend c10d (node ranks are assigned in "
          "each rendezvous round); add --rdzv-backend c10d, or give a fixed --nnodes",
          nnodes));
    }
    if (node_rank_flag->count() > 0) {
      o.notices.push_back(fmt::format(
          "--nnodes {}: ignoring --node-rank {}: with an elastic range every rendezvous round "
          "numbers its nodes (the node hosting the store first, then by arrival)",
          nnodes, o.node_rank));
      o.node_rank = 0;
    }
  }
  o.assign_node_rank =
      o.rdzv_backend == RdzvBackend::kC10d && o.nnodes > 1 && node_rank_flag->count() == 0;
  if (o.elastic()) o.assign_node_rank = true;
  if (o.is_host && !o.assign_node_rank && *o.is_host != (o.node_rank == 0)) {
    throw UsageError(fmt::format(
        "--rdzv-conf is_host={} contradicts --node-rank {}: the store is hosted by node 0 "
        "(with --nnodes {}); drop is_host, or give is_host=1 to node 0 only",
        *o.is_host ? 1 : 0, o.node_rank, o.nnodes));
  }

  if (!o.iface.empty()) {
    for (const std::string& name : rankwise::util::split_interface_list(o.iface)) {
      if (!rankwise::util::is_network_interface(name)) {
        throw UsageError(fmt::format(
            "--iface '{}': '{}' is not a network interface of this node; see `ip -brief link` "
            "and give one such as --iface eth0",
            o.iface, name));
      }
    }
  }
  o.cpu_sched = workers::parse_cpu_sched(cpu_sched);
  workers::check_cpu_sched_allowed(o.cpu_sched);
  if (!prefix_template.empty()) {
    if (tag_flag->count() > 0) {
      throw UsageError("--log-line-prefix-template and --tag both set the line prefix; give one");
    }
    o.tag = output::tag_from_torchrun_template(prefix_template, o.role);
  }
  o.tag_enabled = !no_tag;
  if (o.tag_enabled) output::TagTemplate::parse(o.tag);  // validate now (exit 2)
  if (!only_ranks.empty()) {
    o.only_ranks = parse_index_list(only_ranks, "--only-ranks", "rank", o.world_size(),
                                    fmt::format("world size {}", o.world_size()));
  }
  o.redirects = output::parse_stream_spec(redirects, "--redirects", o.nproc_per_node);
  o.tee = output::parse_stream_spec(tee, "--tee", o.nproc_per_node);
  if (!local_ranks_filter.empty()) {
    o.local_ranks_filter =
        parse_index_list(local_ranks_filter, "--local-ranks-filter", "local rank",
                         o.nproc_per_node, fmt::format("--nproc-per-node {}", o.nproc_per_node));
  }

  o.program = resolve_program(rest.front());
  o.program_argv = rest;
  return o;
}

}  // namespace rankwise::launch::cli
