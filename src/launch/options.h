#pragma once
/// \file options.h
/// The launcher's configuration, parsed from its command line (flags: cli/flags.cpp;
/// validation: cli/parse.cpp).

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch/cli/rdzv_flags.h"
#include "launch/rendezvous/launcher_heartbeat.h"

namespace rankwise::launch {

/// Exit codes of rankwise-run (documented in docs/launcher.md and `-h`).
constexpr int kExitOk = 0;
constexpr int kExitWorkerFailed = 1;
constexpr int kExitUsage = 2;

/// Default tag prepended to every line a worker writes.
constexpr const char* kDefaultTag = "[rank{rank}]: ";

/// Bad usage or configuration, detected before any worker starts; the launcher
/// prints the message and exits with kExitUsage (2). The message names the
/// flag or value at fault and what to do.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The Linux scheduling policy the launcher gives every worker (--cpu-sched),
/// inherited by all of the worker's threads. None needs privileges: a
/// process may always move itself to SCHED_BATCH or SCHED_IDLE.
enum class CpuSched {
  kInherit,  ///< the default: the launcher's own policy (what a plain fork does)
  kNormal,   ///< SCHED_OTHER
  kBatch,    ///< SCHED_BATCH: no wake-up preemption (see BENCHMARKS.md)
  kIdle,     ///< SCHED_IDLE: runs only when nothing else wants the CPU
};

/// Everything the launcher needs to know, validated.
struct LaunchOptions {
  int nproc_per_node = 1;  ///< workers on this node (resolved from cpu/gpu/auto)
  /// Number of nodes; with an elastic range (--nnodes MIN:MAX) its MAX, and
  /// each rendezvous round runs with a copy whose nnodes is that round's count
  /// (elastic_agent.h).
  int nnodes = 1;
  /// --nnodes MIN:MAX: MIN, the fewest nodes a round starts with; == nnodes
  /// for a fixed node count.
  int min_nnodes = 1;
  /// --rdzv-conf last_call_timeout (elastic ranges): once MIN nodes have
  /// joined a round, how long it stays open for more (torchelastic's default, 30 s).
  std::chrono::milliseconds last_call_timeout{30000};
  /// Multi-node: how long another node's launcher may stay silent (its
  /// heartbeat unchanged, or node 0's store unanswered) before this node
  /// names it lost (--rdzv-conf keep_alive_interval x keep_alive_max_attempt).
  std::chrono::milliseconds launcher_silence_limit = rendezvous::kLauncherSilenceLimit;
  int node_rank = 0;       ///< index of this node, in [0, nnodes)
  /// --rdzv-backend c10d on several nodes without --node-rank: the rendezvous
  /// assigns node_rank (the node hosting the store is node 0, the others
  /// take 1, 2, ... as they join; see launcher.cpp).
  bool assign_node_rank = false;
  /// Host (--master-addr, or --rdzv-endpoint's) and port of the rendezvous
  /// store; IPv6 literals without brackets.
  std::string master_addr = "127.0.0.1";
  /// Port of the rendezvous store; unset means "pick a free one" (nnodes == 1).
  std::optional<int> master_port;
  cli::RdzvBackend rdzv_backend = cli::RdzvBackend::kStatic;  ///< --rdzv-backend
  /// Whether this node hosts the store (--rdzv-conf is_host); unset: node 0
  /// does, or, with assign_node_rank, the node whose address the store's is.
  std::optional<bool> is_host;
  /// Timeout of the connection to the store and of each store call
  /// (--rdzv-conf read_timeout); unset: rendezvous_timeout.
  std::optional<std::chrono::milliseconds> store_timeout;
  bool standalone = false;  ///< single node, local store on a free port
  /// --virtual-local-rank: every worker gets LOCAL_RANK=0 and only its own GPU
  /// in CUDA_VISIBLE_DEVICES (the launcher's entry for its local rank).
  bool virtual_local_rank = false;
  std::string tag = kDefaultTag;  ///< line tag template (see tag_template.h)
  bool tag_enabled = true;        ///< false with --no-tag
  std::vector<int> only_ranks;    ///< ranks whose stdout is shown; empty = all
  /// torchrun's --redirects and --tee, per local rank: streams (bits of
  /// console_streams.h) that go to the log files only, and those that go to
  /// both the files and the console. Empty: none.
  std::vector<unsigned> redirects, tee;
  /// --local-ranks-filter: local ranks whose output reaches the console; empty = all.
  std::vector<int> local_ranks_filter;
  std::string log_dir;            ///< per-rank log files root; empty = none
  bool group_by_rank = false;     ///< print each rank's output as one block
  int max_restarts = 0;           ///< restarts of the whole local group
  std::chrono::milliseconds monitor_interval{100};  ///< max wait between checks
  /// --run-id (torchrun's --rdzv-id): TORCHELASTIC_RUN_ID, and the job id
  /// every node of the job must give (node 0 publishes it; see rendezvous.h).
  std::string run_id = "none";
  std::string role = "default";   ///< --role: ROLE_NAME of every worker
  std::chrono::milliseconds grace_period{30000};    ///< SIGTERM -> SIGKILL delay (torchrun's)
  std::chrono::milliseconds rendezvous_timeout{300000};  ///< wait for all nodes
  /// Network interface(s) the workers' Gloo uses (--iface), passed as
  /// GLOO_SOCKET_IFNAME; empty = the workers' own choice (see process_group.h).
  std::string iface;
  /// --hang-timeout: report a hang and end the job when every rank has been
  /// blocked (in a collective, stopped or ended) this long with no collective
  /// completed (see hang_watchdog.h); 0 turns the check off.
  std::chrono::milliseconds hang_timeout{300000};
  /// --deadlock-timeout: report a deadlock and end the job when every rank
  /// has waited this long in collectives that are not all the same one, with
  /// none entered or completed meanwhile (collective_mismatch.h); 0: off.
  std::chrono::milliseconds deadlock_timeout{10000};
  /// --monitor[=SECONDS]: show a live per-rank table of the workers'
  /// heartbeats and flag stragglers and stalled ranks (run_monitor.h).
  /// nullopt: off; 0: the default refresh (1 s on a terminal, 30 s otherwise).
  std::optional<std::chrono::milliseconds> monitor;
  /// --straggler-threshold (given in %): a rank computing more than this
  /// fraction over the median for --straggler-window is a straggler.
  double straggler_threshold = 0.2;
  std::chrono::milliseconds straggler_window{5000};  ///< --straggler-window
  /// Workers' scheduling policy (--cpu-sched; default: see cli/flags.cpp).
  CpuSched cpu_sched = CpuSched::kInherit;
  std::string program;            ///< resolved path of the program to execute
  std::vector<std::string> program_argv;  ///< argv of the program, [0] as given
  /// What the command line tells the user before the run, printed on stderr
  /// by the launcher (e.g. flags that --standalone overrides).
  std::vector<std::string> notices;

  /// Whether --nnodes gave an elastic range MIN:MAX with MIN < MAX.
  bool elastic() const { return min_nnodes != nnodes; }

  /// nnodes * nproc_per_node.
  int world_size() const { return nnodes * nproc_per_node; }
};

}  // namespace rankwise::launch
