#pragma once
/// \file module.h
/// The model as Fabric::setup_module() returns it: a FabricModule wraps whichever engine
/// FabricOptions::strategy trains with (DistributedDataParallel for "ddp" and "zero1",
/// FullyShardedDataParallel for "fsdp"), so that one training loop runs unchanged under each.
/// Build the optimizer over model.parameters() after setup_module (docs/fabric.md#strategies).

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/parallel/fully_sharded.h"

namespace rankwise::fabric {

/// What the Fabric's strategy needs of the engine setup() or setup_module()
/// wrapped the model in, without its module type (built in fabric.h).
struct WrappedModel {
  /// The plain module (its parameters' names are the checkpoints' "model.<name>").
  std::shared_ptr<torch::nn::Module> module;
  /// A no_sync() guard of the engine, held while it lives: the batch's
  /// backward accumulates gradients locally.
  std::function<std::shared_ptr<void>()> no_sync;
  /// DistributedDataParallel's join(), accumulating() and check_replicas()
  /// (empty under fsdp).
  std::function<void()> join;
  std::function<bool()> accumulating;
  std::function<void()> check_replicas;
  /// FullyShardedDataParallel's engine (null under ddp and zero1).
  std::shared_ptr<parallel::fsdp::ShardingEngine> sharding;
};

/// A no_sync() guard of an engine kept alive for a batch (Guard is the
/// engine's NoSync, which can be neither copied nor moved).
template <typename Engine>
std::shared_ptr<void> hold_no_sync(Engine engine) {
  struct Held {
    explicit Held(Engine& e) : engine(e), guard(engine.no_sync()) {}
    Engine engine;  // a copy: it shares the wrapped engine
    decltype(std::declval<Engine&>().no_sync()) guard;
  };
  return std::make_shared<Held>(engine);
}

/// The DistributedDataParallel side of a WrappedModel.
template <typename ModuleType>
WrappedModel wrapped_ddp(parallel::DistributedDataParallel<ModuleType> ddp) {
  WrappedModel wrapped;
  wrapped.module = parallel::ddp::as_module(ddp.module());
  wrapped.no_sync = [ddp]() mutable { return hold_no_sync(ddp); };
  wrapped.join = [ddp]() mutable { ddp.join(); };
  wrapped.accumulating = [ddp] { return ddp.accumulating(); };
  wrapped.check_replicas = [ddp]() mutable { ddp.check_replicas(); };
  return wrapped;
}

/// The FullyShardedDataParallel side of a WrappedModel.
template <typename ModuleType>
WrappedModel wrapped_fsdp(parallel::FullyShardedDataParallel<ModuleType> fsdp) {
  WrappedModel wrapped;
  wrapped.module = parallel::ddp::as_module(fsdp.module());
  wrapped.no_sync = [fsdp]() mutable { return hold_no_sync(fsdp); };
  wrapped.sharding = fsdp.engine();
  return wrapped;
}

/// The model Fabric::setup_module() returns: forward through it. It holds
/// the strategy's engine (a copy shares it with the Fabric). Every method
/// that runs the model or gathers it is collective: every rank, same order.
template <typename ModuleType>
class FabricModule {
 public:
  using Ddp = parallel::DistributedDataParallel<ModuleType>;
  using Fsdp = parallel::FullyShardedDataParallel<ModuleType>;

  explicit FabricModule(Ddp ddp)
      : plain_(parallel::ddp::as_module(ddp.module())), ddp_(std::move(ddp)) {}
  explicit FabricModule(Fsdp fsdp)
      : plain_(parallel::ddp::as_module(fsdp.module())), fsdp_(std::move(fsdp)) {}

  /// The module's forward through the engine (DDP's gradient hooks, or FSDP
  /// gathering each unit around its use). Collective in training.
  template <typename... Args>
  auto forward(Args&&... args) {
    if (fsdp_) return fsdp_->forward(std::forward<Args>(args)...);
    return ddp_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  /// The tensors to build the optimizer over (after setup_module): the
  /// module's parameters under ddp and zero1, this rank's float32 shards
  /// under fsdp. Local.
  std::vector<torch::Tensor> parameters() const {
    if (fsdp_) return fsdp_->parameters();
    return plain_->parameters();
  }
  /// The wrapped module (under fsdp its own parameters are gathered
  /// buffers, freed between uses: read its weights with full_state_dict()).
  ModuleType& module() { return fsdp_ ? fsdp_->module() : ddp_->module(); }

  /// Every parameter and buffer at full size by its dotted name, copies on
  /// every rank. Collective under fsdp (it gathers the shards); local otherwise.
  std::map<std::string, torch::Tensor> full_state_dict() const {
    if (fsdp_) return fsdp_->full_state_dict();
    std::map<std::string, torch::Tensor> full;
    for (const auto& item : checkpoint::state_dict(*plain_)) {
      full.emplace(item.key(), item.value().detach().clone());
    }
    return full;
  }

  /// A guard under which backward accumulates this rank's gradients without
  /// communication, under every strategy (the engine's no_sync()); the first
  /// backward after it synchronises them. Local. `auto guard = model.no_sync();`
  std::shared_ptr<void> no_sync() {
    if (fsdp_) return hold_no_sync(*fsdp_);
    return hold_no_sync(*ddp_);
  }

  /// The engine itself: DistributedDataParallel under ddp and zero1,
  /// FullyShardedDataParallel under fsdp; null for the other.
  Ddp* ddp() { return ddp_ ? &*ddp_ : nullptr; }
  Fsdp* fsdp() { return fsdp_ ? &*fsdp_ : nullptr; }

  /// No `model->`: it would run the module without its engine (see DistributedDataParallel).
  template <bool kNever = false>
  void operator->() const {
    static_assert(kNever,
                  "rankwise::fabric::FabricModule has no operator->: call model.forward(x) or "
                  "model(x) to train, model.module()->... for the wrapped module's other members");
  }

 private:
  std::shared_ptr<torch::nn::Module> plain_;
  std::optional<Ddp> ddp_;
  std::optional<Fsdp> fsdp_;
};

}  // namespace rankwise::fabric
