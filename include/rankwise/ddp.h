#pragma once
/// \file ddp.h
/// DistributedDataParallel for torch::nn::Module: the same replica on every
/// rank, gradients averaged across ranks during backward().
///
/// Usage (every rank):
/// \code
///   auto model = std::make_shared<Net>();          // or torch::nn::Linear(4, 1)
///   rankwise::DistributedDataParallel ddp(model);  // broadcasts rank 0's weights
///   auto loss = torch::mse_loss(ddp.forward(x), y);
///   loss.backward();                               // gradients are now averaged
///   optimizer.step();
///   torch::save(ddp.module(), ...);                // unwrapped: no "module." prefix
/// \endcode
///
/// Semantics follow torch.nn.parallel.DistributedDataParallel: the gradient
/// each rank sees after backward() is the mean over ranks of the per-rank
/// gradients (sum, then divided by world size). A parameter that received no
/// gradient on a rank contributes zeros.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "rankwise/process_group.h"

namespace rankwise {

/// Options of DistributedDataParallel (PyTorch's names and defaults).
struct DistributedDataParallelOptions {
  /// Send rank 0's buffers (e.g. BatchNorm running statistics) to every rank
  /// before each forward.
  DistributedDataParallelOptions& broadcast_buffers(bool v) { broadcast_buffers_ = v; return *this; }
  bool broadcast_buffers_ = true;
};

namespace detail {

/// The type-independent engine behind DistributedDataParallel.
class DataParallelEngine {
 public:
  DataParallelEngine(std::shared_ptr<torch::nn::Module> module,
                     DistributedDataParallelOptions options, ProcessGroup& group);
  ~DataParallelEngine();
  /// Called before each forward: broadcasts buffers if configured.
  void before_forward();
  /// Average every parameter's gradient across ranks now. Collective.
  void all_reduce_gradients();
  void set_require_sync(bool sync);
  bool require_sync() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

template <typename T>
std::shared_ptr<torch::nn::Module> as_module(const std::shared_ptr<T>& module) {
  return module;
}
template <typename T>
std::shared_ptr<torch::nn::Module> as_module(const torch::nn::ModuleHolder<T>& module) {
  return module.ptr();
}

}  // namespace detail

/// Wraps a module (a std::shared_ptr<M> or a holder such as torch::nn::Linear).
/// Construction is collective (every rank): parameters and buffers are
/// broadcast from rank 0. Every backward() through the wrapped module
/// all_reduces the gradients (collective: every rank must run backward the
/// same number of times). Throws Error/TimeoutError like the process group.
template <typename ModuleType>
class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(ModuleType module, DistributedDataParallelOptions options = {},
                                   ProcessGroup& group = process_group())
      : module_(std::move(module)),
        engine_(std::make_shared<detail::DataParallelEngine>(detail::as_module(module_), options,
                                                             group)) {}

  /// Runs the wrapped module's forward (after the buffer broadcast).
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    engine_->before_forward();
    return module_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  /// The unwrapped module: its state_dict has no wrapper prefix.
  ModuleType& module() { return module_; }
  /// Access to the wrapped module's members.
  auto operator->() { return module_.operator->(); }

  /// Parameters of the wrapped module (for the optimizer).
  std::vector<torch::Tensor> parameters() { return detail::as_module(module_)->parameters(); }

  /// Averages gradients now; needed only after backward() calls made under no_sync().
  void all_reduce_gradients() { engine_->all_reduce_gradients(); }

  /// RAII guard: backward() inside it communicates nothing (gradient
  /// accumulation); the next backward() outside averages the accumulated sum.
  class NoSync {
   public:
    explicit NoSync(std::shared_ptr<detail::DataParallelEngine> e) : engine_(std::move(e)) {
      previous_ = engine_->require_sync();
      engine_->set_require_sync(false);
    }
    ~NoSync() { engine_->set_require_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    std::shared_ptr<detail::DataParallelEngine> engine_;
    bool previous_ = true;
  };
  /// `{ auto guard = ddp.no_sync(); loss.backward(); }`
  NoSync no_sync() { return NoSync(engine_); }

 private:
  ModuleType module_;
  std::shared_ptr<detail::DataParallelEngine> engine_;
};

}  // namespace rankwise
