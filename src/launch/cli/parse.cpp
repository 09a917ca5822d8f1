// Command line of rankwise-run (CLI11): parsing and validation (the flags
// and their help text are flags.cpp's).
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "util/text.h"
#include "util/visible_devices.h"
#include "util/interface_list.h"
#include "launch/workers/cpu_sched.h"
#include "launch/workers/visible_devices.h"
#include "launch/cli/flags.h"
#include "launch/cli/index_list.h"
#include "launch/output/console_streams.h"
#include "launch/cli/parse.h"
#include "launch/cli/rdzv_flags.h"
#include "launch/output/tag_template.h"
#include "launch/cli/torchrun_compat.h"

namespace rankwise::launch::cli {

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

namespace {

// Parses argv into the flags' variables. Returns false when help was asked
// for (and printed); throws UsageError on a parse error.
bool parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  return true;
}

// PROGRAM and its arguments: what follows the options (after a "--").
std::vector<std::string> program_and_args(const CLI::App& app) {
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) {
    throw UsageError("no PROGRAM given; usage: rankwise-run [options] PROGRAM [ARGS...], "
                     "e.g. rankwise-run --nproc-per-node 2 ./train");
  }
  if (rest.front().size() > 1 && rest.front()[0] == '-') {
    throw UsageError(fmt::format("unknown option '{}'; see rankwise-run -h", rest.front()));
  }
  return rest;
}

}  // namespace

void check_virtual_local_rank(const LaunchOptions& o, const std::optional<std::string>& cuda_visible_devices,
                              int driver_gpus) {
  if (!o.virtual_local_rank) return;
  std::optional<std::vector<std::string>> entries;
  try {
    entries = util::parse_visible_devices(cuda_visible_devices);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format(
        "--virtual-local-rank gives each worker one entry of CUDA_VISIBLE_DEVICES='{}', which is "
        "invalid: {}; list one GPU per worker (e.g. CUDA_VISIBLE_DEVICES=0,1), or unset it",
        *cuda_visible_devices, e.what()));
  }
  const int n = o.nproc_per_node;
  if (entries && static_cast<int>(entries->size()) < n) {
    throw UsageError(fmt::format(
        "--virtual-local-rank gives each worker its own GPU, but CUDA_VISIBLE_DEVICES='{}' {} for "
        "--nproc-per-node {}; list one GPU per worker, or start fewer workers{}",
        *cuda_visible_devices,
        entries->empty() ? std::string("hides every GPU") : fmt::format("lists {}", entries->size()), n,
        entries->empty() ? " (without GPUs, drop --virtual-local-rank)" : ""));
  }
  if (!entries && driver_gpus > 0 && driver_gpus < n) {
    throw UsageError(fmt::format(
        "--virtual-local-rank gives each worker its own GPU, but this node has {} (the NVIDIA "
        "driver's /proc/driver/nvidia/gpus) for --nproc-per-node {}: the others would see none and "
        "train on the CPU; start {} worker{}, or share a GPU without the flag (--device cuda:0, "
        "over Gloo)",
        driver_gpus, n, driver_gpus, driver_gpus == 1 ? "" : "s"));
  }
}

namespace {

// --nproc-per-node, --nnodes, --node-rank and --standalone's single node.
void resolve_nodes(LaunchOptions& o, const GivenFlags& g) {
  o.nproc_per_node = resolve_nproc_per_node(g.nproc);
  std::tie(o.min_nnodes, o.nnodes) = parse_nnodes(g.nnodes);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    throw UsageError(fmt::format("--node-rank {}: must be in [0, {}) (--nnodes {})", o.node_rank,
                                 o.nnodes, o.nnodes));
  }
  if (o.standalone && o.nnodes > 1) {
    throw UsageError("--standalone runs a single node; drop --standalone or --nnodes");
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  check_virtual_local_rank(o, visible ? std::optional<std::string>(visible) : std::nullopt,
                           workers::visible_gpu_count(std::nullopt));
}

// --rdzv-endpoint HOST[:PORT], checked against --master-addr/--master-port,
// moved into them (`master_port`: nullopt for a free port).
void apply_rdzv_endpoint(LaunchOptions& o, const GivenFlags& g, std::optional<int>& master_port) {
  const Endpoint e = parse_endpoint(g.rdzv_endpoint);
  const int port = e.port.value_or(kDefaultRdzvPort);
  if (g.master_addr_flag->count() > 0 && o.master_addr != e.host) {
    throw UsageError(fmt::format(
        "--rdzv-endpoint '{}' and --master-addr '{}' name different hosts for the store; give "
        "one of them",
        g.rdzv_endpoint, o.master_addr));
  }
  if (master_port && *master_port != port) {
    throw UsageError(fmt::format(
        "--rdzv-endpoint '{}' and --master-port {} name different ports for the store; give "
        "one of them",
        g.rdzv_endpoint, *master_port));
  }
  if (port == 0 && o.nnodes > 1) {
    throw UsageError(fmt::format(
        "--rdzv-endpoint '{}': port 0 (a free port) works on one node only; with --nnodes {} "
        "give the port every node uses, e.g. --rdzv-endpoint {}:{}",
        g.rdzv_endpoint, o.nnodes, e.host, kDefaultRdzvPort));
  }
  o.master_addr = e.host;
  master_port = port;
  if (port == 0) master_port.reset();
}

// Where the store is: --master-addr/--master-port, --rdzv-backend and
// --rdzv-endpoint, or --standalone's local store.
void resolve_store_address(LaunchOptions& o, const GivenFlags& g) {
  std::optional<int> master_port = g.master_port;
  if (master_port && (*master_port < 1 || *master_port > 65535)) {
    throw UsageError(fmt::format("--master-port {}: must be in [1, 65535]", *master_port));
  }
  o.rdzv_backend = parse_rdzv_backend(g.rdzv_backend);
  o.master_addr = without_brackets(o.master_addr);
  if (!g.rdzv_endpoint.empty()) apply_rdzv_endpoint(o, g, master_port);
  if (o.nnodes > 1 && !master_port) {
    throw UsageError(fmt::format(
        "--nnodes {} needs --master-port (and --master-addr, node 0's host), or --rdzv-endpoint "
        "HOST:PORT, so that every node finds the same store; e.g. --master-addr node0 "
        "--master-port 29500",
        o.nnodes));
  }
  if (o.standalone) {
    // As torchrun, --standalone overrides where the store is; say so.
    for (const CLI::Option* given :
         {g.rdzv_endpoint_flag, g.master_addr_flag, g.master_port_flag}) {
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
}

// --max-restarts and the durations in seconds.
void resolve_run_limits(LaunchOptions& o, const GivenFlags& g) {
  if (o.max_restarts < 0) {
    throw UsageError(fmt::format("--max-restarts {}: must be 0 or more", o.max_restarts));
  }
  o.monitor_interval = seconds_to_ms(g.monitor_s, "--monitor-interval", false);
  if (o.monitor_interval.count() == 0) o.monitor_interval = std::chrono::milliseconds(1);
  o.grace_period = seconds_to_ms(g.grace_s, "--grace-period", true);
  o.rendezvous_timeout = seconds_to_ms(g.rdzv_s, "--rendezvous-timeout", false);
  o.hang_timeout = seconds_to_ms(g.hang_s, "--hang-timeout", true);
  o.deadlock_timeout = seconds_to_ms(g.deadlock_s, "--deadlock-timeout", true);
}

// --monitor[=SECONDS] and the straggler rule.
void resolve_monitor(LaunchOptions& o, const GivenFlags& g) {
  if (!g.monitor.empty()) {
    if (g.monitor == "auto") {
      o.monitor = std::chrono::milliseconds(0);
    } else {
      char* end = nullptr;
      const double seconds = std::strtod(g.monitor.c_str(), &end);
      if (end == g.monitor.c_str() || *end != '\0') {
        throw UsageError(
            fmt::format("--monitor={}: expected a number of seconds; e.g. --monitor=5", g.monitor));
      }
      o.monitor = seconds_to_ms(seconds, "--monitor", false);
    }
  }
  if (!(g.straggler_pct > 0 && g.straggler_pct <= 100000)) {
    throw UsageError(fmt::format(
        "--straggler-threshold {}: expected a percentage above 0; e.g. --straggler-threshold 20",
        g.straggler_pct));
  }
  o.straggler_threshold = g.straggler_pct / 100.0;
  o.straggler_window = seconds_to_ms(g.straggler_window_s, "--straggler-window", false);
}

// --rdzv-conf keep_alive_interval x keep_alive_max_attempt (torchelastic's
// defaults 5 s x 3): how long a silent launcher is waited for. Launchers beat
// every second, so less than 3 s would name live ones lost.
void apply_keep_alive(LaunchOptions& o, const RdzvConf& conf) {
  if (!conf.keep_alive_interval && !conf.keep_alive_max_attempt) return;
  const auto interval = conf.keep_alive_interval.value_or(std::chrono::milliseconds(5000));
  const int attempts = conf.keep_alive_max_attempt.value_or(3);
  const auto limit = interval * attempts;
  if (limit < 3 * rendezvous::kHeartbeatInterval) {
    throw UsageError(fmt::format(
        "--rdzv-conf keep_alive_interval={} x keep_alive_max_attempt={} = {} s: a launcher "
        "silent that long would be named lost while alive (launchers beat every {} s); give at "
        "least 3 s, e.g. keep_alive_interval=1,keep_alive_max_attempt=3",
        interval.count() / 1000.0, attempts, limit.count() / 1000.0,
        rendezvous::kHeartbeatInterval.count() / 1000.0));
  }
  o.launcher_silence_limit = limit;
}

// --rdzv-conf's settings, checked against the flags they repeat.
void apply_rdzv_conf(LaunchOptions& o, const GivenFlags& g) {
  const RdzvConf conf = parse_rdzv_conf(g.rdzv_conf);
  if (conf.join_timeout) {
    if (g.rdzv_timeout_flag->count() > 0 && *conf.join_timeout != o.rendezvous_timeout) {
      throw UsageError(fmt::format(
          "--rdzv-conf join_timeout={} and --rendezvous-timeout {} disagree; give one of them",
          conf.join_timeout->count() / 1000.0, g.rdzv_s));
    }
    o.rendezvous_timeout = *conf.join_timeout;
  }
  o.store_timeout = conf.read_timeout;
  o.is_host = conf.is_host;
  if (conf.last_call_timeout) o.last_call_timeout = *conf.last_call_timeout;
  apply_keep_alive(o, conf);
}

// Who numbers the nodes: --node-rank, or the rendezvous (c10d without it, an
// elastic range always); --rdzv-conf is_host must agree with it.
void resolve_node_numbering(LaunchOptions& o, const GivenFlags& g) {
  if (o.elastic()) {
    // torchrun's static backend has a fixed membership (it takes MAX and
    // needs --node-rank); a range needs the dynamic one.
    if (o.rdzv_backend != RdzvBackend::kC10d) {
      throw UsageError(fmt::format(
          "--nnodes {}: an elastic range needs --rdzv-backend c10d (node ranks are assigned in "
          "each rendezvous round); add --rdzv-backend c10d, or give a fixed --nnodes",
          g.nnodes));
    }
    if (g.node_rank_flag->count() > 0) {
      o.notices.push_back(fmt::format(
          "--nnodes {}: ignoring --node-rank {}: with an elastic range every rendezvous round "
          "numbers its nodes (the node hosting the store first, then by arrival)",
          g.nnodes, o.node_rank));
      o.node_rank = 0;
    }
  }
  o.assign_node_rank =
      o.rdzv_backend == RdzvBackend::kC10d && o.nnodes > 1 && g.node_rank_flag->count() == 0;
  if (o.elastic()) o.assign_node_rank = true;
  if (o.is_host && !o.assign_node_rank && *o.is_host != (o.node_rank == 0)) {
    throw UsageError(fmt::format(
        "--rdzv-conf is_host={} contradicts --node-rank {}: the store is hosted by node 0 "
        "(with --nnodes {}); drop is_host, or give is_host=1 to node 0 only",
        *o.is_host ? 1 : 0, o.node_rank, o.nnodes));
  }
}

// --iface (interfaces of this node) and --cpu-sched.
void resolve_worker_settings(LaunchOptions& o, const GivenFlags& g) {
  if (!o.iface.empty()) {
    for (const std::string& name : rankwise::util::split_list(o.iface)) {
      if (!rankwise::util::is_network_interface(name)) {
        throw UsageError(fmt::format(
            "--iface '{}': '{}' is not a network interface of this node; see `ip -brief link` "
            "and give one such as --iface eth0",
            o.iface, name));
      }
    }
  }
  o.cpu_sched = workers::parse_cpu_sched(g.cpu_sched);
  workers::check_cpu_sched_allowed(o.cpu_sched);
}

// The line prefix and which streams of which ranks go where.
void resolve_output(LaunchOptions& o, const GivenFlags& g) {
  if (!g.prefix_template.empty()) {
    if (g.tag_flag->count() > 0) {
      throw UsageError("--log-line-prefix-template and --tag both set the line prefix; give one");
    }
    o.tag = output::tag_from_torchrun_template(g.prefix_template, o.role);
  }
  o.tag_enabled = !g.no_tag;
  if (o.tag_enabled) output::TagTemplate::parse(o.tag);  // validate now (exit 2)
  if (!g.only_ranks.empty()) {
    o.only_ranks = parse_index_list(g.only_ranks, "--only-ranks", "rank", o.world_size(),
                                    fmt::format("world size {}", o.world_size()));
  }
  o.redirects = output::parse_stream_spec(g.redirects, "--redirects", o.nproc_per_node);
  o.tee = output::parse_stream_spec(g.tee, "--tee", o.nproc_per_node);
  if (!g.local_ranks_filter.empty()) {
    o.local_ranks_filter =
        parse_index_list(g.local_ranks_filter, "--local-ranks-filter", "local rank",
                         o.nproc_per_node, fmt::format("--nproc-per-node {}", o.nproc_per_node));
  }
}

}  // namespace

std::optional<LaunchOptions> parse_command_line(int argc, char** argv) {
  LaunchOptions o;
  GivenFlags g;
  CLI::App app("", "rankwise-run");  // its description: add_flags()
  add_flags(app, o, g);
  const std::function<void()> check_torchrun_only = add_torchrun_only_flags(app);
  read_torchrun_environment_defaults(app);

  if (!parse_flags(app, argc, argv)) return std::nullopt;
  check_torchrun_only();
  const std::vector<std::string> rest = program_and_args(app);

  // Validation, in this order: the first problem found is the one reported.
  resolve_nodes(o, g);
  resolve_store_address(o, g);
  resolve_run_limits(o, g);
  resolve_monitor(o, g);
  apply_rdzv_conf(o, g);
  resolve_node_numbering(o, g);
  resolve_worker_settings(o, g);
  resolve_output(o, g);

  o.program = resolve_program(rest.front());
  o.program_argv = rest;
  return o;
}

}  // namespace rankwise::launch::cli
