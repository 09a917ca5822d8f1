#pragma once
/// \file process_group.h
/// Rendezvous and collectives on PyTorch's own c10d engine: a TCPStore for
/// rendezvous and ProcessGroupGloo for CPU tensors. rankwise never implements
/// its own transport.
///
/// Collectives must be called by every rank of the group, in the same order,
/// with tensors of the same shape and dtype ("collective: every rank, same
/// order"). Each waits at most `timeout` and then throws TimeoutError; a peer
/// that died makes them throw PeerError at once.

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rankwise/env.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace rankwise {

/// Reduction applied by all_reduce. kAvg is a sum followed by one division by
/// the world size (Gloo has no native average); it needs a floating dtype.
enum class ReduceOp { kSum, kAvg, kMin, kMax };

/// Options of init(), with fluent setters like torch::nn::LinearOptions.
struct InitOptions {
  /// Timeout of every collective and of the rendezvous (default 300 s,
  /// torch.distributed's default for Gloo is 30 min; ours fails sooner).
  InitOptions& timeout(std::chrono::milliseconds t) { timeout_ = t; return *this; }
  /// "gloo" (CPU tensors). "auto" picks gloo on this build.
  InitOptions& backend(std::string b) { backend_ = std::move(b); return *this; }
  /// Threads of ProcessGroupGloo that run collectives (default 2, >= 1). More
  /// than one lets asynchronous collectives (DDP's buckets) run side by side;
  /// see BENCHMARKS.md for what 1, 2 and 4 cost on a 2-core machine.
  InitOptions& gloo_threads(int n) { gloo_threads_ = n; return *this; }
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
  std::string backend_{"auto"};
  int gloo_threads_{2};
};

/// A c10d process group over every rank of the job.
class ProcessGroup {
 public:
  /// Rendezvous at MASTER_ADDR:MASTER_PORT and create the group. Throws
  /// RendezvousError (naming the address and the timeout) when the store
  /// cannot be reached or not every rank arrives in time; ConfigError on an
  /// unknown backend.
  ProcessGroup(const LaunchEnv& env, const InitOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }
  const LaunchEnv& env() const { return env_; }
  std::string backend() const;
  std::chrono::milliseconds timeout() const { return options_.timeout_; }

  /// In-place all_reduce of `tensor` (any shape; dtype float, double or an
  /// integer type; kAvg needs floating point). Collective: every rank, same order.
  void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  /// In-place broadcast of `tensor` from `root`. Collective.
  void broadcast(torch::Tensor& tensor, int root = 0);
  /// Returns world_size tensors, entry r being rank r's `tensor` (every rank
  /// passes the same shape and dtype). Collective.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);
  /// Blocks until every rank arrived. Collective.
  void barrier();

  /// The underlying c10d objects, for code that needs more than the above.
  const c10::intrusive_ptr<c10d::ProcessGroup>& c10d_group() const { return group_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

 private:
  LaunchEnv env_;
  InitOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

/// Creates the global process group from the environment (see env.h). Calling
/// it again returns the existing group. Collective: every rank.
ProcessGroup& init(const InitOptions& options = {});
/// True after init() and before shutdown().
bool is_initialized();
/// The global group; throws Error when init() was not called.
ProcessGroup& process_group();
/// Destroys the global group (optional; it also ends with the process).
void shutdown();

/// This process's rank: from the group when initialized, else from the environment.
int rank();
/// The job's world size: from the group when initialized, else from the environment.
int world_size();
/// This process's rank on its node.
int local_rank();

/// Shorthands for the global group's collectives (collective: every rank, same order).
void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
void broadcast(torch::Tensor& tensor, int root = 0);
std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);
void barrier();

}  // namespace rankwise
