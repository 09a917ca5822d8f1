#pragma once
/// \file elastic_agent.h
/// rankwise-run with an elastic node count (`--nnodes MIN:MAX --rdzv-backend
/// c10d`): the job runs in rendezvous rounds (elastic_rendezvous.h). Each
/// round has from MIN to MAX nodes, numbered from 0 (the node hosting the
/// store first, then by arrival); its workers get WORLD_SIZE = nodes x
/// nproc-per-node, RANK, GROUP_RANK and GROUP_WORLD_SIZE of that round.
///
/// A round ends, and every node of it joins the next one, when
///  - a node not in it joins the job while it has fewer than MAX nodes: its
///    workers are stopped (SIGTERM, then SIGKILL after the grace period); not
///    a failure, not counted against --max-restarts;
///  - a worker fails or a node leaves (its launcher got a signal, or stopped
///    answering: launcher_heartbeat.h): counted against --max-restarts, as
///    torchelastic counts it; a node that does not come back is named.
/// The job's workers are expected to resume from their last checkpoint at the
/// round's world size (RANKWISE_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT
/// give the round number). The node hosting the store must stay for the whole
/// job (as torchrun's c10d backend when an agent hosts the store).

#include <chrono>
#include <string>
#include <vector>

#include "launch/options.h"
#include "launch/rendezvous/node_rendezvous.h"

namespace rankwise::launch {

/// What the launcher set up before the rounds.
struct ElasticSetup {
  std::string host;                   ///< this node's host name
  std::string error_dir;              ///< the launcher's temporary directory
  std::vector<std::string> base_env;  ///< the workers' environment, less ours
  std::string job_key;                ///< the job's secret key ("" for none)
  bool host_store = false;            ///< whether this launcher hosts the store
  std::chrono::milliseconds store_timeout{0};  ///< per store call
};

/// Runs this node's rounds until the job ends and returns the launcher's
/// exit code: 0 when a round's workers all succeeded (or the job ended
/// successfully before this node was let in), 1 when a round failed with no
/// restart left or the rendezvous failed (fewer than MIN nodes within the
/// rendezvous timeout), 128+n after signal n.
int run_elastic(const LaunchOptions& o, ElasticSetup setup, rendezvous::NodeRendezvous& rdzv);

}  // namespace rankwise::launch
