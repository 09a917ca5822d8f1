#pragma once
/// \file grad_scaler.h
/// Dynamic loss scaling for float16 training, as Python's torch.amp.GradScaler (absent from
/// libtorch's C++ API): scale the loss, unscale and check the gradients, skip the step on
/// inf/nan, then back off or grow the scale. The inf/nan flag is agreed in one all_reduce per
/// step, so every rank skips the same steps. See docs/mixed-precision.md.

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace rankwise::dist {
class ProcessGroup;
}  // namespace rankwise::dist

namespace rankwise::amp {

/// Options of GradScaler, with Python's names and defaults (setters and
/// getters as torch::nn options). growth_factor must be > 1 and
/// backoff_factor < 1 (ConfigError otherwise, when enabled).
struct GradScalerOptions {
  /// The scale before the first update (2^16).
  TORCH_ARG(double, init_scale) = 65536.0;
  /// Multiplies the scale after growth_interval steps in a row without inf/nan.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// Multiplies the scale after a step with inf/nan (which is skipped).
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Clean steps in a row before the scale grows.
  TORCH_ARG(int64_t, growth_interval) = 2000;
  /// false: scale() returns its argument, step() always steps, the rest does nothing.
  TORCH_ARG(bool, enabled) = true;
};

/// An optimizer that is not a torch::optim::Optimizer but has `parameters()`
/// (every parameter it steps) and `step()`, e.g.
/// parallel::ZeroRedundancyOptimizer.
template <typename Optimizer>
concept OptimizerLike = !std::derived_from<Optimizer, torch::optim::Optimizer> &&
                        requires(Optimizer& o) {
                          { o.parameters() } -> std::convertible_to<std::vector<torch::Tensor>>;
                          o.step();
                        };

/// Python's torch.amp.GradScaler. The scale (float32) lives on the first loss's device;
/// parameters may be float32, float64 or bfloat16 (a float16 gradient is an Error). With a
/// group, unscale_() and step() are collective (a 2-element float32 all_reduce (max) per
/// optimizer); the rest is local. Throws Error for calls out of order (unscale_ or step twice
/// before update(), any before scale()), ConfigError for bad options, CheckpointError for a
/// malformed state_dict.
class GradScaler {
 public:
  /// With the default process group: at each unscale_(), the global group
  /// when rankwise::dist::is_initialized() and its world size is > 1, else
  /// none (so it may be built before dist::init()).
  explicit GradScaler(GradScalerOptions options = {});
  /// With `group` (not owned; it must outlive the scaler), or none at all
  /// (nullptr: no communication, each rank decides alone).
  GradScaler(GradScalerOptions options, dist::ProcessGroup* group);

  /// `loss` * scale (in loss's dtype: a float16 loss stays float16). The
  /// first call puts the scale on loss's device. Local. Returns `loss`
  /// itself when disabled.
  torch::Tensor scale(const torch::Tensor& loss);

  /// Divides every defined gradient of the optimizer's parameters by the
  /// scale, in place, and records whether one held an inf or a nan (agreed
  /// across the group's ranks). Optional: step() does it when not done (call
  /// it first to clip gradients). Collective with a group. Throws Error when
  /// called twice for this optimizer before update(), after step(), before
  /// any scale(), or on a float16 gradient.
  void unscale_(torch::optim::Optimizer& optimizer);

  /// unscale_() if not done yet, then optimizer.step() unless a gradient (on
  /// any rank of the group) held an inf or a nan. Returns whether it stepped
  /// (Python returns the step's result; None when skipped). Reads one flag
  /// from the device. Collective with a group. Throws Error when called twice
  /// for this optimizer before update(), or when no parameter has a gradient.
  bool step(torch::optim::Optimizer& optimizer);

  /// The same for an OptimizerLike, e.g. parallel::ZeroRedundancyOptimizer,
  /// whose step() is itself collective: every rank then skips or steps together.
  template <OptimizerLike Optimizer>
  void unscale_(Optimizer& optimizer) {
    unscale_parameters(&optimizer, optimizer.parameters());
  }
  template <OptimizerLike Optimizer>
  bool step(Optimizer& optimizer) {
    return step_parameters(&optimizer, optimizer.parameters(), [&optimizer] { optimizer.step(); });
  }

  /// Ends the iteration, after step() of every optimizer: the scale backs
  /// off when any of them found inf/nan, else grows after growth_interval
  /// clean updates in a row. Local (the flags are already agreed). Throws
  /// Error before any scale(), or when no optimizer was unscaled since the
  /// last update().
  void update();
  /// Sets the scale to `new_scale` instead (the growth tracker is kept, as in
  /// Python). Local. Throws Error before any scale().
  void update(double new_scale);

  /// The current scale (init_scale before the first scale(); 1.0 when
  /// disabled). Reads it from the device. Local.
  double get_scale() const;
  /// Clean updates since the scale last changed (Python's _get_growth_tracker()).
  int64_t get_growth_tracker() const;
  const GradScalerOptions& options() const { return options_; }
  bool is_enabled() const { return options_.enabled(); }

  /// Python's GradScaler.state_dict(): {"scale": float, "growth_factor":
  /// float, "backoff_factor": float, "growth_interval": int,
  /// "_growth_tracker": int}, empty when disabled. Put it in a
  /// checkpoint::Checkpoint as any value: Python's torch.load reads it, and
  /// Python's scaler.load_state_dict() takes it. Local.
  c10::impl::GenericDict state_dict() const;
  /// Restores a state_dict() of this class or of Python's GradScaler (a dict
  /// of those keys; numbers may be int or float). Does nothing when disabled.
  /// Local. Throws CheckpointError naming the key when the dict is empty (as
  /// saved by a disabled scaler), a key is missing or has another type.
  void load_state_dict(const c10::IValue& state_dict);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    // {inf/nan found, no gradient at all}, agreed across the group's ranks.
    torch::Tensor flags;
  };

  GradScalerOptions options_;
  bool default_group_;
  dist::ProcessGroup* group_;
  torch::Tensor scale_;           // float32 [], created by the first scale()
  torch::Tensor growth_tracker_;  // int32 [], created with scale_
  int64_t init_growth_tracker_ = 0;
  std::unordered_map<const void*, OptimizerState> optimizers_;  // by address, as Python's id()

  dist::ProcessGroup* group() const;
  void check_scale_exists(const char* operation) const;
  void unscale_parameters(const void* optimizer, const std::vector<torch::Tensor>& parameters);
  bool step_parameters(const void* optimizer, const std::vector<torch::Tensor>& parameters,
                       const std::function<void()>& optimizer_step);
};

}  // namespace rankwise::amp
