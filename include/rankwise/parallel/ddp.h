#pragma once
/// \file ddp.h
/// DistributedDataParallel for torch::nn::Module on c10d's Reducer (PyTorch's DDP engine:
/// reverse-order gradient buckets, an all_reduce per bucket from autograd hooks). After
/// backward() each gradient is the mean over ranks. Every rank must run the same forward and
/// backward passes (collective: every rank, same order); for uneven inputs see join().
/// See docs/ddp-and-zero.md#distributeddataparallel.

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <source_location>
#include <string>
#include <tuple>
#include <vector>

#include "rankwise/dist/process_group.h"

namespace rankwise::parallel {

/// What happens when ranks run out of batches at different steps (see join()).
/// Either way each training forward launches a one-element all_reduce (how
/// many ranks still have batches; a rank in join() answers 0) that runs
/// beside the forward pass without being waited for, as PyTorch's Join does.
enum class UnevenInputs {
  /// Every rank raises an Error naming the rank(s) that ran out (default):
  /// the ranks still training raise at the end of the forward of the step the
  /// peer missed, before any gradient of that step is all_reduced, so no rank
  /// applies a step with missing gradients. Cost: forward() waits for the
  /// count (started before the forward, so usually already done).
  kError,
  /// Ranks that ran out keep shadowing the others' collectives with zeros
  /// until every rank is done (PyTorch's Join). Gradients of such a step are
  /// the sum over the ranks that still had data divided by the full world
  /// size, as PyTorch's default (divide_by_initial_world_size=True).
  kJoin,
};

/// Options of DistributedDataParallel (PyTorch's names and defaults; setters and getters as
/// torch::nn options), e.g. DistributedDataParallelOptions().bucket_cap_mb(50).
struct DistributedDataParallelOptions {
  /// Bucket size in MiB for gradient all_reduce (PyTorch: 25, first bucket 1 MiB; another cap
  /// applies to every bucket; 0: one bucket per parameter; negative: ConfigError).
  /// bucket_parameter_names() shows the layout.
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  /// Send rank 0's buffers (e.g. BatchNorm running statistics) to every rank
  /// before each forward (PyTorch: true).
  TORCH_ARG(bool, broadcast_buffers) = true;
  /// false (PyTorch's default): a parameter that got no gradient is an Error naming it. true:
  /// such parameters are found each step and reduced as zeros (the set may vary by step and
  /// rank); costs a graph traversal per training forward and one int32 all_reduce per
  /// parameter per step. Every tensor forward() returns must take part in the loss.
  TORCH_ARG(bool, find_unused_parameters) = false;
  /// Gradients become views into the all_reduce buckets (saves memory).
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  /// Promise that every step uses the same parameters (on each rank; ranks
  /// may differ): the first step records them and all_reduces every bucket
  /// at the end of its backward, later steps need no graph traversal. A step
  /// that breaks the promise makes the next forward throw Error naming the
  /// parameters.
  TORCH_ARG(bool, static_graph) = false;
  /// Behaviour when ranks have different numbers of batches (default kError).
  TORCH_ARG(UnevenInputs, uneven_inputs) = UnevenInputs::kError;
};

namespace ddp {

/// The type-independent engine behind DistributedDataParallel.
class DataParallelEngine {
 public:
  /// Validates options (ConfigError), checks that every rank holds the same
  /// parameter shapes, broadcasts rank 0's parameters and buffers, and builds
  /// the Reducer. Collective.
  DataParallelEngine(std::shared_ptr<torch::nn::Module> module,
                     DistributedDataParallelOptions options, dist::ProcessGroup& group);
  ~DataParallelEngine();
  DataParallelEngine(const DataParallelEngine&) = delete;
  DataParallelEngine& operator=(const DataParallelEngine&) = delete;

  void before_forward();
  void after_forward(const std::vector<torch::Tensor>& outputs);
  void join();
  void set_require_sync(bool sync) { require_sync_ = sync; }
  bool require_sync() const { return require_sync_; }
  bool accumulating() const { return accumulating_; }
  void check_replicas();
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool require_sync_ = true;
  bool accumulating_ = false;  // the last training forward ran inside no_sync()
};

inline void collect_tensors(const torch::Tensor& t, std::vector<torch::Tensor>& out) {
  out.push_back(t);
}
inline void collect_tensors(const std::vector<torch::Tensor>& v, std::vector<torch::Tensor>& out) {
  out.insert(out.end(), v.begin(), v.end());
}
template <typename... T>
void collect_tensors(const std::tuple<T...>& t, std::vector<torch::Tensor>& out) {
  std::apply([&](const auto&... e) { (collect_tensors(e, out), ...); }, t);
}
template <typename T>
void collect_tensors(const T&, std::vector<torch::Tensor>&) {}

template <typename T>
std::shared_ptr<torch::nn::Module> as_module(const std::shared_ptr<T>& module) {
  return module;
}
template <typename T>
std::shared_ptr<torch::nn::Module> as_module(const torch::nn::ModuleHolder<T>& module) {
  return module.ptr();
}

}  // namespace ddp

/// Wraps a module (a std::shared_ptr<M> or a holder such as torch::nn::Linear). Construction
/// is collective: rank 0's parameters and buffers are broadcast. Each training forward
/// (grad mode, outside no_sync()) prepares the Reducer; backward() all_reduces by bucket.
/// Throws ConfigError (bad options, parameter shapes differ across ranks), Error/TimeoutError
/// from collectives, Error naming parameters without gradient or ranks that ran out of inputs.
template <typename ModuleType>
class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(ModuleType module, DistributedDataParallelOptions options = {},
                                   dist::ProcessGroup& group = dist::process_group())
      : module_(std::move(module)),
        engine_(std::make_shared<parallel::ddp::DataParallelEngine>(parallel::ddp::as_module(module_), options,
                                                             group)) {}

  /// Runs the wrapped module's forward (collective in training mode).
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    engine_->before_forward();
    auto output = module_->forward(std::forward<Args>(args)...);
    std::vector<torch::Tensor> tensors;
    parallel::ddp::collect_tensors(output, tensors);
    engine_->after_forward(tensors);
    return output;
  }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  /// The unwrapped module: its state_dict has no wrapper prefix.
  ModuleType& module() { return module_; }
  /// No `ddp->`: with libtorch's habit of `model->forward(x)`, `ddp->forward(x)`
  /// would run the wrapped module without DistributedDataParallel, so every
  /// rank would train its own replica with unsynchronized gradients, silently.
  /// Using it is a compile-time error that says what to write instead.
  template <bool kNever = false>
  void operator->() const {
    static_assert(kNever,
                  "rankwise::parallel::DistributedDataParallel has no operator->: ddp->forward(x) would "
                  "bypass gradient synchronization. Call ddp.forward(x) or ddp(x) to train, and "
                  "ddp.module()->... for the wrapped module's other members");
  }
  /// Parameters of the wrapped module (for the optimizer).
  std::vector<torch::Tensor> parameters() { return parallel::ddp::as_module(module_)->parameters(); }

  /// RAII guard for gradient accumulation: forward/backward inside it
  /// communicate nothing; the first synced backward after it averages the
  /// accumulated gradients (PyTorch's no_sync()).
  class NoSync {
   public:
    explicit NoSync(std::shared_ptr<parallel::ddp::DataParallelEngine> e) : engine_(std::move(e)) {
      previous_ = engine_->require_sync();
      engine_->set_require_sync(false);
    }
    ~NoSync() { engine_->set_require_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    std::shared_ptr<parallel::ddp::DataParallelEngine> engine_;
    bool previous_ = true;
  };
  /// `{ auto guard = ddp.no_sync(); ddp.forward(x).sum().backward(); }`
  NoSync no_sync() { return NoSync(engine_); }
  /// True when the last training forward (grad mode) ran inside no_sync():
  /// this rank holds gradients accumulated locally and not yet averaged; the
  /// next synced forward/backward clears it. Local. The Fabric defers a
  /// scheduled checkpoint while it is true (see docs/fabric.md).
  bool accumulating() const { return engine_->accumulating(); }

  /// Call on a rank after its last training batch; returns when every rank
  /// has called it. Collective: every rank, once per epoch, after its loop.
  /// With UnevenInputs::kError (default) a rank that joins while others still
  /// train makes every rank throw Error naming the rank(s) that ran out; with
  /// kJoin it shadows the others' steps with zero gradients until all joined.
  void join(std::source_location site = std::source_location::current()) {
    const dist::CallerSite caller(site);
    engine_->join();
  }

  /// Debug helper (collective): compares every parameter's checksum across
  /// ranks; throws Error naming the parameters and ranks that differ.
  void check_replicas(std::source_location site = std::source_location::current()) {
    const dist::CallerSite caller(site);
    engine_->check_replicas();
  }

  /// The Reducer's gradient buckets now, in the order their all_reduce runs
  /// in backward (one all_reduce per bucket and step): for each bucket the
  /// dotted names of its parameters. The layout is built at construction and
  /// rebuilt once, at the second training forward, from the order gradients
  /// arrived in the first backward. Local (no communication); every rank
  /// holds the same layout. Call it outside forward/backward.
  std::vector<std::vector<std::string>> bucket_parameter_names() const {
    return engine_->bucket_parameter_names();
  }

 private:
  ModuleType module_;
  std::shared_ptr<parallel::ddp::DataParallelEngine> engine_;
};

}  // namespace rankwise::parallel
