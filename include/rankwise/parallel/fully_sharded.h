#pragma once
/// \file fully_sharded.h
/// Fully sharded data parallel (ZeRO-2/3) for any torch::nn::Module, in the
/// spirit of PyTorch's FSDP2 `fully_shard`: every parameter is split on dim 0
/// across the ranks, gathered per unit for its forward and backward, and its
/// gradient reduce-scattered back into the shards. The model needs no change:
/// docs/fsdp.md says how units are found and what everything costs.

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/checkpoint/sharded_metadata.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/parallel/ddp.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace rankwise::parallel {

/// FSDP2's MixedPrecisionPolicy: parameters gathered and computed in
/// `param_dtype`, gradients reduced in `reduce_dtype` (default: param_dtype),
/// the root's output cast to `output_dtype`; shards and optimizer state stay float32.
struct MixedPrecisionPolicy {
  TORCH_ARG(std::optional<c10::ScalarType>, param_dtype) = std::nullopt;
  TORCH_ARG(std::optional<c10::ScalarType>, reduce_dtype) = std::nullopt;
  TORCH_ARG(std::optional<c10::ScalarType>, output_dtype) = std::nullopt;
  TORCH_ARG(bool, cast_forward_inputs) = true;  // floating inputs of forward() to param_dtype
};

/// Which submodules are units (gathered together). Default: each child of
/// every outermost Sequential or ModuleList. A non-empty `types`, `names` or a
/// positive `min_params` replaces the default; the root's other parameters form the root unit.
struct UnitPolicy {
  using Predicate = std::function<bool(const std::string& name, const torch::nn::Module& module)>;
  TORCH_ARG(std::vector<Predicate>, types) = {};     // add with of_type<T>()
  TORCH_ARG(std::vector<std::string>, names) = {};   // submodule names, e.g. "blocks.0"
  TORCH_ARG(int64_t, min_params) = 0;  // a submodule holding at least this many unwrapped elements

 public:
  /// Adds "every submodule whose type is (or derives from) ModuleImpl".
  template <typename ModuleImpl>
  UnitPolicy& of_type() {
    types_.push_back([](const std::string&, const torch::nn::Module& m) {
      return dynamic_cast<const ModuleImpl*>(&m) != nullptr;
    });
    return *this;
  }
  bool is_default() const { return types_.empty() && names_.empty() && min_params_ <= 0; }
};

/// Options of FullyShardedDataParallel (FSDP2's names where they exist).
struct FullyShardOptions {
  TORCH_ARG(bool, reshard_after_forward) = true;  // true: ZeRO-3; false: ZeRO-2
  TORCH_ARG(MixedPrecisionPolicy, mixed_precision) = {};
  TORCH_ARG(UnitPolicy, units) = {};
  TORCH_ARG(bool, prefetch) = true;  // gather the next unit while this one computes
};

/// What the engine measured so far (for tests and benchmarks).
struct ShardingStats {
  int64_t units = 0;                 // units, the root's included
  int64_t max_units_gathered = 0;    // most units gathered (or being gathered) at once
  int64_t all_gathers = 0;
  int64_t reduce_scatters = 0;
  int64_t gathered_bytes_high_water = 0;  // most bytes of gathered parameters at once
  int64_t max_reduces_in_flight = 0;  // most reduce-scatters (each a unit's full gradient) at once
};

namespace fsdp {

struct ParamShard;  // one parameter's layout over the ranks (src/parallel/fsdp/layout.h)

class ShardingEngine {
 public:
  ShardingEngine(std::shared_ptr<torch::nn::Module> module, FullyShardOptions options,
                 dist::ProcessGroup& group);
  ~ShardingEngine();
  ShardingEngine(const ShardingEngine&) = delete;
  ShardingEngine& operator=(const ShardingEngine&) = delete;

  void before_forward();
  void after_forward();
  void forward_failed() noexcept;  // names the unit on stderr
  std::optional<c10::ScalarType> input_dtype() const;
  std::optional<c10::ScalarType> output_dtype() const;
  void set_require_sync(bool sync);
  bool require_sync() const;
  std::vector<torch::Tensor> parameters() const;
  std::vector<std::string> parameter_names() const;
  std::vector<std::vector<std::string>> unit_parameter_names() const;
  torch::Tensor clip_grad_norm(double max_norm, double norm_type, bool error_if_nonfinite);
  checkpoint::ShardedState sharded_state_dict(const std::string& prefix) const;
  checkpoint::ShardedState sharded_state_dict_to_load(const std::string& prefix) const;
  void load_sharded_state_dict(const checkpoint::ShardedState& loaded, const std::string& prefix);
  std::map<std::string, torch::Tensor> full_state_dict() const;
  void check_optimizer(const torch::optim::Optimizer& optimizer) const;
  ShardingStats stats() const;
  int rank() const;
  std::vector<const ParamShard*> layouts() const;  // parameters()' order

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp

/// A module trained with its parameters, gradients and optimizer state
/// sharded across the ranks. Construct it on every rank (it broadcasts rank 0's
/// weights, then frees all but this rank's shard); build the optimizer over
/// parameters(). Throws ConfigError on an empty unit policy match or a group mismatch.
template <typename ModuleType>
class FullyShardedDataParallel {
 public:
  explicit FullyShardedDataParallel(ModuleType module, FullyShardOptions options = {},
                                    dist::ProcessGroup& group = dist::process_group())
      : module_(std::move(module)),
        engine_(std::make_shared<fsdp::ShardingEngine>(ddp::as_module(module_), std::move(options),
                                                       group)) {}

  /// The module's forward with each unit gathered around its use. Every rank.
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    engine_->before_forward();
    auto output = [&]() -> decltype(auto) {
      try {
        return call_forward(std::forward<Args>(args)...);
      } catch (...) {
        engine_->forward_failed();  // names the unit on stderr; the exception goes on unchanged
        throw;
      }
    }();
    engine_->after_forward();
    if constexpr (std::is_same_v<decltype(output), torch::Tensor>) {
      const auto dtype = engine_->output_dtype();
      if (dtype && output.is_floating_point()) output = output.to(*dtype);
    }
    return output;
  }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  /// This rank's shards (float32 masters, dim 0 rows [r*c, r*c + rows)):
  /// the tensors to give the optimizer, in the module's parameter order.
  std::vector<torch::Tensor> parameters() const { return engine_->parameters(); }
  /// The module's parameter names, in parameters()' order.
  std::vector<std::string> parameter_names() const { return engine_->parameter_names(); }
  /// Each unit's parameter names, the root unit last.
  std::vector<std::vector<std::string>> unit_parameter_names() const {
    return engine_->unit_parameter_names();
  }
  /// The wrapped module. Its own parameters are gathered buffers, freed between uses.
  ModuleType& module() { return module_; }

  /// Skips the reduce-scatter while it lives: gradients accumulate unsharded
  /// (full size, as DDP) until a backward outside it reduces them all.
  class NoSync {
   public:
    explicit NoSync(std::shared_ptr<fsdp::ShardingEngine> e) : engine_(std::move(e)) {
      previous_ = engine_->require_sync();
      engine_->set_require_sync(false);
    }
    ~NoSync() { engine_->set_require_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    std::shared_ptr<fsdp::ShardingEngine> engine_;
    bool previous_ = true;
  };
  NoSync no_sync() { return NoSync(engine_); }

  /// Clips the shards' gradients by the norm over all shards of all ranks;
  /// returns that norm (float32 scalar). Every rank, after backward.
  torch::Tensor clip_grad_norm(double max_norm, double norm_type = 2.0,
                               bool error_if_nonfinite = false) {
    return engine_->clip_grad_norm(max_norm, norm_type, error_if_nonfinite);
  }

  /// "prefix + name" -> this rank's rows of each parameter, for save_sharded
  /// (DCP's layout; no communication). Buffers are plain tensors (rank 0's).
  checkpoint::ShardedState sharded_state_dict(const std::string& prefix = "model.") const {
    return engine_->sharded_state_dict(prefix);
  }
  /// The entries load_sharded fills for this rank, then load_sharded_state_dict().
  checkpoint::ShardedState sharded_state_dict_to_load(const std::string& prefix = "model.") const {
    return engine_->sharded_state_dict_to_load(prefix);
  }
  void load_sharded_state_dict(const checkpoint::ShardedState& loaded,
                               const std::string& prefix = "model.") {
    engine_->load_sharded_state_dict(loaded, prefix);
  }
  /// Every parameter and buffer, gathered to full size on every rank (a collective).
  std::map<std::string, torch::Tensor> full_state_dict() const { return engine_->full_state_dict(); }

  /// Throws ConfigError unless `optimizer` holds exactly parameters(), in order.
  void check_optimizer(const torch::optim::Optimizer& optimizer) const {
    engine_->check_optimizer(optimizer);
  }
  ShardingStats stats() const { return engine_->stats(); }
  const std::shared_ptr<fsdp::ShardingEngine>& engine() const { return engine_; }

  template <bool kNever = false>
  void operator->() const {
    static_assert(kNever,
                  "rankwise::parallel::FullyShardedDataParallel has no operator->: call "
                  "fsdp.forward(x) or fsdp(x) to train, fsdp.module()->... for other members");
  }

 private:
  template <typename... Args>
  decltype(auto) call_forward(Args&&... args) {
    const auto dtype = engine_->input_dtype();
    if (!dtype) return module_->forward(std::forward<Args>(args)...);
    return module_->forward(cast_input(std::forward<Args>(args), *dtype)...);
  }
  template <typename T>
  static decltype(auto) cast_input(T&& value, c10::ScalarType dtype) {
    if constexpr (std::is_same_v<std::decay_t<T>, torch::Tensor>) {
      return torch::Tensor(value.defined() && value.is_floating_point() ? value.to(dtype) : value);
    } else {
      return std::forward<T>(value);
    }
  }

  ModuleType module_;
  std::shared_ptr<fsdp::ShardingEngine> engine_;
};

/// The optimizer's state as sharded entries ("prefix + state.<i>.<name>",
/// "prefix + param_groups.<g>.<option>", as ZeroRedundancyOptimizer's), each
/// state tensor placed at its parameter's rows. `optimizer` must hold
/// fsdp.parameters(). No communication.
checkpoint::ShardedState fsdp_optimizer_state_dict(const fsdp::ShardingEngine& engine,
                                                   const torch::optim::Optimizer& optimizer,
                                                   const std::string& prefix = "optim.");
/// The entries load_sharded fills for this rank's rows of `stored`'s optimizer state.
checkpoint::ShardedState fsdp_optimizer_state_dict_to_load(
    const fsdp::ShardingEngine& engine,
    const std::map<std::string, checkpoint::ShardedEntryMetadata>& stored,
    const std::string& prefix = "optim.");
/// Loads what load_sharded filled into `optimizer` (which holds fsdp.parameters()).
void load_fsdp_optimizer_state_dict(const fsdp::ShardingEngine& engine,
                                    torch::optim::Optimizer& optimizer,
                                    const checkpoint::ShardedState& loaded,
                                    const std::string& prefix = "optim.");

}  // namespace rankwise::parallel
