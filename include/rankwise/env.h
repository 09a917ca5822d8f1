#pragma once
/// \file env.h
/// The launch environment of a worker (rank, sizes and rendezvous store, from the variables of
/// rankwise-run / torchrun, mpirun or srun, first match wins; MASTER_ADDR and MASTER_PORT
/// default to 127.0.0.1 and 29500; none set: rank 0 of 1), and the one place where rankwise
/// reads environment variables. See docs/launcher.md for each launcher's variables.

#include <map>
#include <optional>
#include <string>

namespace rankwise {

/// Which convention the launch variables followed.
enum class LaunchSource { kNone, kTorchrun, kMpirun, kSrun };

/// The worker's place in the job, parsed from the environment.
struct LaunchEnv {
  int rank = 0;              ///< global rank, in [0, world_size)
  int local_rank = 0;        ///< rank on this node, in [0, local_world_size)
  int world_size = 1;        ///< number of processes in the job
  int local_world_size = 1;  ///< number of processes on this node
  int node_rank = 0;         ///< GROUP_RANK: index of this node
  std::string master_addr = "127.0.0.1";  ///< host of the rendezvous store
  int master_port = 29500;                ///< port of the rendezvous store
  int restart_count = 0;  ///< RANKWISE_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT
  /// True when the launcher hosts the TCPStore and every worker is a client
  /// (rankwise-run sets RANKWISE_AGENT_STORE=1; torchrun sets
  /// TORCHELASTIC_USE_AGENT_STORE=True). Otherwise rank 0 hosts it.
  bool agent_store = false;
  /// rankwise-run --virtual-local-rank (RANKWISE_VIRTUAL_LOCAL_RANK=1): every
  /// worker has LOCAL_RANK 0 and its own GPU alone in CUDA_VISIBLE_DEVICES,
  /// so the device choice treats it as the only process of its node.
  bool virtual_local_rank = false;
  LaunchSource source = LaunchSource::kNone;

  /// Parses the process environment. Throws ConfigError naming the variable
  /// and its value when one is not a number, RANK >= WORLD_SIZE, or the port
  /// is outside [1, 65535].
  static LaunchEnv from_environment();
  /// Same rules over an explicit variable map (used by tests).
  static LaunchEnv from_map(const std::map<std::string, std::string>& vars);
};

/// Reads one environment variable; nullopt when unset. Every other part of
/// rankwise reads the environment through this function.
std::optional<std::string> get_env(const std::string& name);

}  // namespace rankwise
