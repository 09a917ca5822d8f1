#pragma once
/// \file exit_barrier.h
/// The end of a multi-node job on one node: a node whose workers succeeded
/// waits for the other nodes, so that node 0 keeps the store up while their
/// workers may still use it, and stops waiting when another node failed or
/// left. After a failure, node 0 waits for the others a little (they read the
/// failure's details from its store); the other nodes do not wait.

#include "launch/options.h"
#include "launch/rendezvous/node_rendezvous.h"
#include "launch/workers/worker_group.h"

namespace rankwise::launch::rendezvous {

/// Runs the exit barrier for this node (`o.node_rank` of `o.nnodes`, the
/// last attempt `config.attempt` ended with exit code `code`) and returns the
/// node's exit code: `code`, or 1 when its workers succeeded but another
/// node's failed (said on stderr), or 128+n after signal n (also recorded in
/// the store with NodeRendezvous::close()).
int exit_barrier(const LaunchOptions& o, bool host_store, int code, const workers::AttemptConfig& config,
                 NodeRendezvous& rdzv);

}  // namespace rankwise::launch::rendezvous
