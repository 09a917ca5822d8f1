#pragma once
/// \file process_group.h
/// Rendezvous and collectives on PyTorch's c10d: a TCPStore, ProcessGroupGloo for CPU
/// tensors and, with backend "nccl" ("cpu:gloo,cuda:nccl"), ProcessGroupNCCL for CUDA ones.
/// Collectives: every rank of the group, same order, same shapes and dtypes; they block until
/// done on this rank, throw TimeoutError after `timeout` and PeerError when a peer died (Gloo;
/// NCCL: docs/gpu.md#timeouts-under-nccl). See docs/ddp-and-zero.md#the-process-group.

#include <torch/arg.h>
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "rankwise/env.h"
#include "rankwise/diag/flight_recorder.h"

namespace c10d {
class ProcessGroup;
class Store;
class Work;
}  // namespace c10d

namespace rankwise::diag {
class CollectiveProgressPublisher;
class CompletionPoller;
}  // namespace rankwise::diag

namespace rankwise::dist {

/// Reduction applied by all_reduce. kAvg is a sum followed by one division by
/// the world size (Gloo has no native average); it needs a floating dtype.
enum class ReduceOp { kSum, kAvg, kMin, kMax };

/// Options of init() (setters and getters as torch::nn options), e.g.
/// InitOptions().backend("gloo").timeout(std::chrono::minutes(10)).
struct InitOptions {
  /// Timeout of every collective and of the rendezvous (default 300 s,
  /// torch.distributed's default for Gloo is 30 min; ours fails sooner).
  /// Under NCCL also the watchdog's timeout (docs/gpu.md#timeouts-under-nccl).
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::seconds(300);
  /// "auto" (default): NCCL (with Gloo for CPU tensors) when this libtorch
  /// has CUDA and NCCL and rankwise::device() is a GPU, i.e. every local rank
  /// has its own visible GPU; otherwise "gloo". "gloo": Gloo for every
  /// tensor. "nccl": as auto's first case, or ConfigError (saying why and to
  /// use "gloo" or "auto") on a build without NCCL or a rank without a GPU of
  /// its own.
  TORCH_ARG(std::string, backend) = "auto";
  /// Threads of ProcessGroupGloo that run collectives (default 2, >= 1). More
  /// than one lets asynchronous collectives (DDP's buckets) run side by side;
  /// see BENCHMARKS.md for what 1, 2 and 4 cost on a 2-core machine.
  TORCH_ARG(int, gloo_threads) = 2;
  /// Checked collectives (default false; as TORCH_DISTRIBUTED_DEBUG=DETAIL): before each
  /// collective of this class every rank exchanges its call (operation, dtype, shape, root,
  /// site) in one extra 256-byte all_gather; out-of-step ranks throw CollectiveMismatchError
  /// naming each call. DDP's buckets are not checked. On under a Fabric, or with
  /// RANKWISE_DEBUG=detail. See docs/hangs-and-debugging.md#checked-collectives.
  TORCH_ARG(bool, check_collectives) = false;
};

/// A c10d process group over every rank of the job. Each collective is recorded in the
/// flight recorder with its caller's line (`site`, filled in by the compiler) and each rank
/// publishes its progress to the store, so a failure names the ranks that held it up
/// (docs/hangs-and-debugging.md#what-rankwise-records).
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
  /// The backend in use: "gloo", or "cpu:gloo,cuda:nccl" (Python's name of
  /// the same group) when NCCL serves CUDA tensors.
  std::string backend() const;
  std::chrono::milliseconds timeout() const { return options_.timeout(); }
  /// Turns checked collectives (InitOptions::check_collectives) on or off.
  /// Collective in effect: every rank must make the same choice at the same
  /// point, or the next collective pairs a check with a real collective.
  void set_check_collectives(bool on) { options_.check_collectives(on); }
  bool check_collectives() const { return options_.check_collectives(); }

  /// In-place all_reduce of `tensor` (any shape; dtype float, double or an
  /// integer type; kAvg needs floating point). Collective: every rank, same order.
  void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                  std::source_location site = std::source_location::current());
  /// In-place broadcast of `tensor` from `root`. Collective.
  void broadcast(torch::Tensor& tensor, int root = 0,
                 std::source_location site = std::source_location::current());
  /// Returns world_size tensors, entry r being rank r's `tensor` (every rank
  /// passes the same shape and dtype). Collective.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor,
                                        std::source_location site = std::source_location::current());
  /// Blocks the calling thread until every rank has arrived. Collective. It
  /// runs on Gloo under either backend: NCCL's own barrier is an all_reduce
  /// that orders this rank's CUDA stream but may return before the other
  /// ranks arrive. It does not wait for CUDA work this rank queued before it
  /// (kernels, or NCCL collectives nobody waited for): call
  /// torch::cuda::synchronize() first where that matters.
  void barrier(std::source_location site = std::source_location::current());

  /// A barrier that names the ranks that do not arrive, on every backend (as
  /// torch.distributed.monitored_barrier): waits at most `timeout` (0: the group's), then every
  /// waiting rank throws TimeoutError naming the missing ranks. Without `wait_all_ranks`, a
  /// missing rank that destroyed its group ends the wait at once (PeerError). Ranks arriving
  /// with different names throw CollectiveMismatchError. Collective: every rank, same order.
  void monitored_barrier(const std::string& name,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                         bool wait_all_ranks = false,
                         std::source_location site = std::source_location::current());

  /// This rank's flight recorder (flight_recorder.h).
  const diag::FlightRecorder& flight_recorder() const { return *recorder_; }

  /// For a collective launched on c10d_group() directly, from the same code on every rank
  /// (e.g. DDP's per-step count): records `call` as entered now, and as completed or failed
  /// when `work` has run (on CUDA a background thread polls it). Such collectives are not
  /// checked by check_collectives.
  void record_launched(diag::CollectiveRecord call, const c10::intrusive_ptr<c10d::Work>& work);

  /// The underlying c10d objects, for code that needs more than the above.
  const c10::intrusive_ptr<c10d::ProcessGroup>& c10d_group() const { return group_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

 private:
  LaunchEnv env_;
  InitOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::shared_ptr<diag::FlightRecorder> recorder_;
  std::unique_ptr<diag::CollectiveProgressPublisher> publisher_;  // null for world size 1
  std::unique_ptr<diag::CompletionPoller> device_completions_;  // at the first CUDA work
  uint64_t monitored_barriers_ = 0;  // monitored_barrier calls so far
  // Records `call` in the flight recorder, publishes the progress and runs
  // `body` (the check, then the collective) with its sequence number.
  void recorded(diag::CollectiveRecord call, const std::function<void(uint64_t sequence)>& body);
  // What the failure of collective `sequence` adds to its message: the
  // ranks that had not entered it (from the store), and the path of the
  // flight recorder's dump (written here).
  std::string explain_failure(uint64_t sequence);
  // With checked collectives on: exchanges the call with every rank first
  // (dist/collective_check.h) and throws CollectiveMismatchError when the
  // calls differ.
  void check_call(const diag::CollectiveRecord& call, const torch::Tensor& tensor, uint64_t sequence);
  // all_gather without the check; `operation` names it in errors, which
  // explain collective `sequence`'s failure.
  std::vector<torch::Tensor> gather(const torch::Tensor& tensor, const std::string& operation,
                                    uint64_t sequence);
};

/// Creates the global process group from the environment (see env.h); called again, returns
/// the existing group. Collective: every rank. Also ignores SIGPIPE when left at its default
/// (a dead peer then fails collectives with an error). Throws as ProcessGroup's constructor.
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
/// This process's rank and the job's size in the default group; 0 and 1
/// before init() (a process on its own, whatever the environment says). Local.
int rank_or_zero();
int world_size_or_one();

/// While one lives, every collective this thread runs names `site` (the
/// outermost CallerSite wins) in reports, errors and hang diagnoses: public
/// functions that run collectives hold one for their caller's line. Local.
class CallerSite {
 public:
  explicit CallerSite(const std::source_location& site);
  ~CallerSite();
  CallerSite(const CallerSite&) = delete;
  CallerSite& operator=(const CallerSite&) = delete;
  /// The innermost-held caller's site, else `own`.
  static std::source_location reported(const std::source_location& own);

 private:
  bool outermost_;
};

/// Shorthands for the global group's collectives (collective: every rank, same order;
/// tensors on the CPU or, with a CUDA libtorch, on a GPU).
void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                std::source_location site = std::source_location::current());
void broadcast(torch::Tensor& tensor, int root = 0,
               std::source_location site = std::source_location::current());
std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor,
                                      std::source_location site = std::source_location::current());
void barrier(std::source_location site = std::source_location::current());
/// process_group().monitored_barrier(...).
void monitored_barrier(const std::string& name,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                       bool wait_all_ranks = false,
                       std::source_location site = std::source_location::current());

}  // namespace rankwise::dist
