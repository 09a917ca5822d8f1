// rankwise-run's flags (CLI11): names, help text, defaults.
#include "launch/cli/flags.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>

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
start or go on (rendezvous timed out, store lost); 2 bad usage or configuration; 75
preempted: after SIGTERM every worker saved a checkpoint (a Fabric run) and exited 75, so
requeue the job with --resume; 128+n the launcher got signal n (forwarded to every worker).

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

// CLI11 cannot describe the pass-through PROGRAM [ARGS...] in its usage line.
class LauncherFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return fmt::format(
        "Usage: {} [OPTIONS] PROGRAM [ARGS...]\n"
        "  Options end at PROGRAM; everything after it is passed to PROGRAM unchanged.\n",
        name);
  }
  // A flag with an optional value shows as --flag[=VALUE], not CLI11's --flag{default}.
  std::string make_option_name(const CLI::Option* option, bool positional) const override {
    if (option->get_name() == "--monitor") return "--monitor[=SECONDS]";
    return CLI::Formatter::make_option_name(option, positional);
  }
};

void configure_app(CLI::App& app) {
  app.description(kDescription);
  app.prefix_command();  // options end at PROGRAM; the rest belongs to it
  app.footer(kFooter);
  app.formatter(std::make_shared<LauncherFormatter>());
  app.get_formatter()->column_width(34);
  // A flag given twice takes its last value, as with torchrun's argparse.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// Nodes and the rendezvous store: --nproc-per-node to --standalone.
void add_node_flags(CLI::App& app, LaunchOptions& o, GivenFlags& g) {
  app.add_option("--nproc-per-node,--nproc_per_node", g.nproc,
                 "Workers on this node: N >= 1, cpu (one per CPU core), gpu (one per visible "
                 "GPU) or auto (gpu if any, else cpu). Default 1. E.g. --nproc-per-node 4");
  app.add_option("--nnodes", g.nnodes,
                 "Number of nodes (default 1), or an elastic range MIN:MAX (needs "
                 "--rdzv-backend c10d: the job runs in rounds of MIN to MAX nodes, and starts a "
                 "new round when a node joins or leaves). E.g. --nnodes 2, --nnodes 1:4");
  g.node_rank_flag = app.add_option(
      "--node-rank,--node_rank", o.node_rank,
      "Index of this node in [0, nnodes) (default 0; with --rdzv-backend c10d, default: node 0 "
      "is the node that hosts the store, the others are numbered as they join). "
      "E.g. --node-rank 1");
  g.master_addr_flag = app.add_option(
      "--master-addr,--master_addr", o.master_addr,
      "Host of node 0, which hosts the rendezvous store (default 127.0.0.1; IPv6 as [fd00::1]). "
      "E.g. --master-addr node0");
  g.master_port_flag =
      app.add_option("--master-port,--master_port", g.master_port,
                     "Port of the rendezvous store; default: a free port (single node only; "
                     "required with --nnodes > 1). E.g. --master-port 29500");
  app.add_option("--rdzv-backend,--rdzv_backend", g.rdzv_backend,
                 "torchrun's rendezvous backend: static (the default) or c10d, both rankwise's "
                 "store hosted by node 0's launcher; c10d also numbers the nodes when "
                 "--node-rank is not given. E.g. --rdzv-backend c10d");
  g.rdzv_endpoint_flag =
      app.add_option("--rdzv-endpoint,--rdzv_endpoint", g.rdzv_endpoint,
                     "HOST[:PORT] of the rendezvous store, the same as --master-addr HOST "
                     "--master-port PORT (default port 29400; :0 a free port, one node only). "
                     "E.g. --rdzv-endpoint node0:29400");
  app.add_option("--rdzv-conf,--rdzv_conf", g.rdzv_conf,
                 "Rendezvous settings key=value,...: join_timeout=S (= --rendezvous-timeout), "
                 "read_timeout=S (connecting to the store and each store call; default: the "
                 "rendezvous timeout), is_host=1|0 (whether this node hosts the store), "
                 "last_call_timeout=S (elastic --nnodes MIN:MAX: how long a round stays open "
                 "for more nodes once MIN have joined; default 30), keep_alive_interval=S and "
                 "keep_alive_max_attempt=N (multi-node: another node's launcher silent for S x N "
                 "s is named lost; default 5 x 3). E.g. --rdzv-conf "
                 "join_timeout=600,last_call_timeout=10");
  app.add_flag("--standalone", o.standalone,
               "Single node with a local store on a free port (like torchrun --standalone)");
  app.add_flag("--virtual-local-rank,--virtual_local_rank", o.virtual_local_rank,
               "Each worker sees only its own GPU, as device 0: LOCAL_RANK=0 and "
               "CUDA_VISIBLE_DEVICES set to this launcher's entry for its local rank (as "
               "torchrun --virtual-local-rank); --device auto then trains on it");
}

// What the workers' output looks like and where it goes: --tag to --group-by-rank.
void add_output_flags(CLI::App& app, LaunchOptions& o, GivenFlags& g) {
  g.tag_flag = app.add_option(
      "--tag", o.tag,
      "Prefix of every output line; placeholders {rank} {local_rank} {node_rank} "
      "{world_size} {host} (default '[rank{rank}]: '). E.g. --tag '{host}:{rank}| '");
  app.add_option("--log-line-prefix-template,--log_line_prefix_template", g.prefix_template,
                 "torchrun's spelling of --tag: ${rank} ${local_rank} ${hostname} ${role_name}; "
                 "it prefixes every line, tee'd or not. E.g. "
                 "--log-line-prefix-template '${hostname}:${rank}: '");
  app.add_flag("--no-tag,--no_tag", g.no_tag, "Do not tag output lines");
  app.add_option("--only-ranks,--only_ranks", g.only_ranks,
                 "Show only these ranks' stdout (stderr is always shown). E.g. --only-ranks 0,3");
  app.add_option("--local-ranks-filter,--local_ranks_filter", g.local_ranks_filter,
                 "Show only these local ranks' output, stdout and stderr, on the console (the "
                 "log files keep every rank's). E.g. --local-ranks-filter 0");
  app.add_option("-r,--redirects", g.redirects,
                 "Streams that go to the log files instead of the console: 0 none, 1 stdout, "
                 "2 stderr, 3 both, for every local rank or per local rank (0:3,1:2); without "
                 "--log-dir the files go to a new temporary directory. E.g. --redirects 3");
  app.add_option("-t,--tee", g.tee,
                 "Streams that go to the console and the log files (same values as "
                 "--redirects). E.g. --tee 3");
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "Write each rank's full stdout and stderr to "
                 "DIR/attempt_<n>/rank_<r>.stdout|.stderr, whatever --redirects and --tee say. "
                 "E.g. --log-dir logs");
  app.add_flag("--group-by-rank,--group_by_rank", o.group_by_rank,
               "Print each rank's output as one block, in rank order, when the workers end");
}

// The job's run, restarts and timeouts: --max-restarts to --rendezvous-timeout.
void add_run_flags(CLI::App& app, LaunchOptions& o, GivenFlags& g) {
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "Restart all workers up to K times after a failure (default 0). "
                 "E.g. --max-restarts 2");
  app.add_option("--monitor-interval,--monitor_interval", g.monitor_s,
                 "Longest wait in seconds between checks of the workers (default 0.1; exits "
                 "and signals are seen at once anyway). E.g. --monitor-interval 1");
  app.add_option("--run-id,--run_id,--rdzv-id,--rdzv_id", o.run_id,
                 "Job id, passed as TORCHELASTIC_RUN_ID (default none); on several nodes every "
                 "node must give the same (a node of another job is refused, naming both). "
                 "E.g. --rdzv-id job42");
  app.add_option("--role", o.role,
                 "Role of the workers, passed as ROLE_NAME (default 'default'). "
                 "E.g. --role trainer");
  app.add_option("--grace-period,--grace_period,--shutdown-timeout,--shutdown_timeout", g.grace_s,
                 "Seconds between SIGTERM and SIGKILL when stopping workers (default 30, as "
                 "torchrun's; a Fabric run saves its current step in it when the launcher gets "
                 "SIGTERM; --shutdown-timeout is torchrun's name). E.g. --grace-period 60");
  g.rdzv_timeout_flag = app.add_option(
      "--rendezvous-timeout,--rendezvous_timeout", g.rdzv_s,
      "Seconds to wait for every node to join (default 300). E.g. --rendezvous-timeout 60");
}

// Watching the job: --hang-timeout, --monitor and its straggler rule.
void add_watch_flags(CLI::App& app, GivenFlags& g) {
  app.add_option("--hang-timeout,--hang_timeout", g.hang_s,
                 "Seconds after which a job whose ranks all wait in collectives, are stopped "
                 "or have ended, with no collective completed, is a hang: print each rank's "
                 "last collective and its threads' stacks, then stop the job (default 300; 0: "
                 "off). A rank working outside collectives is never a hang. E.g. "
                 "--hang-timeout 60");
  app.add_option("--deadlock-timeout,--deadlock_timeout", g.deadlock_s,
                 "Seconds after which a job whose ranks all wait in collectives that are not "
                 "all the same one (another sequence number or operation: e.g. a barrier "
                 "inside `if (rank == 0)`), with none entered or completed meanwhile, is a "
                 "deadlock: name the rank that entered alone, its call site and what the "
                 "others wait in, then stop the job (default 10; 0: off). A rank working "
                 "outside collectives is never one. E.g. --deadlock-timeout 30");
  app.add_flag("--monitor{auto}", g.monitor,
               "Show a live table of every rank's heartbeat (step, samples/s, compute and wait "
               "ms per step, loss, memory, heartbeat age, state) on stderr, redrawn in place on "
               "a terminal every SECONDS (default 1), else printed every SECONDS (default 30); "
               "name stragglers and stalled ranks as they start and end. Give SECONDS with '='. "
               "E.g. --monitor=5");
  app.add_option("--straggler-threshold,--straggler_threshold", g.straggler_pct,
                 "With --monitor: a rank whose compute time per step is more than this many "
                 "percent over the median of the ranks (and at least 2 ms over it) for "
                 "--straggler-window seconds is a straggler (default 20). "
                 "E.g. --straggler-threshold 50");
  app.add_option("--straggler-window,--straggler_window", g.straggler_window_s,
                 "With --monitor: seconds a rank must stay over the straggler threshold before "
                 "it is named (default 5). E.g. --straggler-window 10");
}

// How the workers run: --cpu-sched and --iface.
void add_worker_flags(CLI::App& app, LaunchOptions& o, GivenFlags& g) {
  app.add_option("--cpu-sched,--cpu_sched", g.cpu_sched,
                 "Linux scheduling policy of every worker and all its threads: inherit (the "
                 "default: the launcher's own), normal (SCHED_OTHER), batch (SCHED_BATCH: no "
                 "wake-up preemption; Gloo all_reduces of small tensors took 3x less time on an "
                 "idle 2-core machine, much more under other load, see BENCHMARKS.md) or idle "
                 "(SCHED_IDLE). None needs privileges. E.g. --cpu-sched batch");
  app.add_option("--iface", o.iface,
                 "Network interface(s) for the workers' Gloo traffic, comma-separated; sets "
                 "GLOO_SOCKET_IFNAME for every worker (default: the interface that routes to "
                 "--master-addr). E.g. --iface eth1");
}

}  // namespace

void add_flags(CLI::App& app, LaunchOptions& o, GivenFlags& g) {
  configure_app(app);
  add_node_flags(app, o, g);
  add_output_flags(app, o, g);
  add_run_flags(app, o, g);
  add_watch_flags(app, g);
  add_worker_flags(app, o, g);
}

}  // namespace rankwise::launch::cli
