#pragma once
/// \file process_group.h
/// Rendezvous and collectives on PyTorch's own c10d engine: a TCPStore for
/// rendezvous, ProcessGroupGloo for CPU tensors and, where every rank has a
/// GPU of its own and libtorch has CUDA, ProcessGroupNCCL for CUDA tensors.
/// rankwise never implements its own transport.
///
/// Backends (InitOptions::backend, ProcessGroup::backend()):
/// - "gloo": one Gloo group for CPU tensors and, where libtorch has CUDA, for
///   CUDA tensors too (copied through the host; several ranks may share a GPU).
/// - "cpu:gloo,cuda:nccl" (asked for as "nccl"): NCCL for CUDA tensors, bound
///   to this rank's device (rankwise::device(), made the current CUDA device),
///   and Gloo beside it for CPU tensors (DDP's join count, metrics metadata,
///   barrier). Needs a libtorch with CUDA and one GPU per local rank.
///
/// Collectives must be called by every rank of the group, in the same order,
/// with tensors of the same shape and dtype ("collective: every rank, same
/// order"). The functions below (all_reduce, broadcast, all_gather, barrier)
/// block the calling thread until the collective is complete on this rank,
/// with either backend, and wait at most `timeout`: then they throw
/// TimeoutError; a peer that died makes them throw PeerError at once (Gloo).
///
/// Timeouts under NCCL differ (from c10d's ProcessGroupNCCL, not observed on
/// a machine with several GPUs): NCCL's watchdog thread checks every CUDA
/// collective against the same `timeout`, and with PyTorch's default
/// TORCH_NCCL_ASYNC_ERROR_HANDLING=3 it ends the process (SIGABRT; stderr
/// shows c10::DistBackendError "Watchdog caught collective operation
/// timeout"). So a function below that times out on CUDA tensors throws
/// TimeoutError in the calling thread, but the process may be ended by the
/// watchdog before or while the exception is handled; the group is unusable
/// afterwards either way. Collectives that rankwise does not wait for on the
/// host, such as DistributedDataParallel's gradient buckets (ordered on the
/// CUDA stream), never throw: the watchdog ends the process after `timeout`.
/// Under rankwise-run both show as that rank's failure (its TimeoutError or
/// its signal), and the other ranks then fail too. A dead peer under NCCL is
/// may likewise be seen only at the timeout.

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

/// Options of init() (setters and getters as torch::nn options).
///
/// Example:
/// \code
///   rankwise::dist::init(rankwise::dist::InitOptions()
///                      .backend("gloo")
///                      .timeout(std::chrono::minutes(10))
///                      .check_collectives(true));
/// \endcode
struct InitOptions {
  /// Timeout of every collective and of the rendezvous (default 300 s,
  /// torch.distributed's default for Gloo is 30 min; ours fails sooner).
  /// Under NCCL also the watchdog's timeout (see the file comment).
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
  /// Checked collectives (default false): before each collective below,
  /// every rank exchanges what it is about to call (operation, dtype, shape,
  /// root) in one extra all_gather of 256 bytes, and ranks that are out of
  /// step (e.g. a collective inside `if (rank() == 0)`) throw
  /// CollectiveMismatchError on every rank, naming each rank's call, instead
  /// of pairing unrelated collectives or waiting for the timeout. As
  /// PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL. It covers the collectives of
  /// this class (and so metrics, checkpoints, consensus), not DDP's gradient
  /// buckets. rankwise::Fabric turns it on, and so does the environment
  /// variable RANKWISE_DEBUG=detail (for any program; "off" or unset leaves
  /// this option as it is, anything else is a ConfigError). The record also
  /// carries the reduce op and each rank's call site, which the error names.
  /// See also ProcessGroup::set_check_collectives().
  TORCH_ARG(bool, check_collectives) = false;
};

/// A c10d process group over every rank of the job.
///
/// Every collective below is recorded in the group's flight recorder
/// (flight_recorder.h) with the caller's file and line (the `site` argument,
/// filled in by the compiler: callers never pass it), and each rank
/// publishes its progress (last collective entered and completed, a
/// heartbeat) to the job's store from a background thread. So a collective
/// that fails names the ranks that held it up, e.g. "rank 0/4: barrier #3 at
/// train.cpp:88 failed after a timeout of 10000 ms: not every rank reached
/// this collective: ranks 1, 2, 3 never entered it (#3): ranks 1, 2, 3: last
/// in all_reduce #2 (Float [1], sum) at train.cpp:80 (completed 9.8 s ago)".
/// Library code that calls these (metrics, checkpoints, DDP's join) is named
/// by its own file and line.
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
  /// torch.distributed.monitored_barrier, which exists for Gloo only). Each
  /// rank marks its arrival in the job's store and waits, at most `timeout`
  /// (0: the group's timeout), until every rank has. Then every rank that is
  /// still waiting, rank 0 included, throws TimeoutError naming the same
  /// missing ranks, the barrier's `name` and call site, and what each missing
  /// rank was doing (its progress): "ranks 1, 2, 3 did not reach
  /// monitored_barrier 'eval-done' within 10 s". With `wait_all_ranks` false
  /// (the default) a missing rank that has already destroyed its process
  /// group (returned from main) ends the wait at once with PeerError naming
  /// it; with true the wait lasts the full timeout, naming every rank that
  /// has not arrived by then. Ranks that arrive with different names throw
  /// CollectiveMismatchError. Collective: every rank, same order (it counts
  /// as a collective in the flight recorder).
  void monitored_barrier(const std::string& name,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                         bool wait_all_ranks = false,
                         std::source_location site = std::source_location::current());

  /// This rank's flight recorder (flight_recorder.h).
  const diag::FlightRecorder& flight_recorder() const { return *recorder_; }

  /// For a collective launched on c10d_group() directly, from the same code
  /// on every rank (rankwise's DistributedDataParallel launches its per-step
  /// count of ranks that still have inputs so): records `call` as entered now
  /// and as completed or failed when `work` has run. On the CPU that is when
  /// its future completes; on CUDA, where the future completes at launch, a
  /// background thread polls work->isCompleted() (diag/completion_poller.h).
  /// Such collectives are not checked in debug mode (check_collectives), as
  /// c10d's Reducer's buckets are not.
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

/// Creates the global process group from the environment (see env.h). Calling
/// it again returns the existing group. Collective: every rank.
/// It also ignores SIGPIPE when the program left it at its default (as the
/// Python interpreter does for every PyTorch job): Gloo writes to its peers
/// with writev(2), so a rank that dies would otherwise kill the ranks that
/// write to it next, silently, instead of their collective failing with an
/// error that names it. A handler the program installed is kept.
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
