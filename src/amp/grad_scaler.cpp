#include "rankwise/amp/grad_scaler.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "amp/kernels/scale_kernels.h"
#include "core/check.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"

namespace rankwise::amp {

namespace {

// The gradients of `parameters` to unscale, grouped by device and dtype (as
// ATen's kernel wants them). Throws Error on a float16 gradient.
struct GradGroup {
  c10::Device device;
  c10::ScalarType dtype;
  std::vector<torch::Tensor> grads;
};

std::vector<GradGroup> grads_by_device_and_dtype(const std::vector<torch::Tensor>& parameters) {
  std::vector<GradGroup> groups;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const auto& grad = parameters[i].grad();
    if (!grad.defined()) continue;
    RANKWISE_CHECK(grad.scalar_type() != at::kHalf, Error, core::here(),
                   "GradScaler::unscale_: parameter {} has a float16 gradient; keep the parameters "
                   "(master weights) in float32 and run the forward pass in float16",
                   i);
    const auto values = grad.is_sparse() ? grad._values() : grad;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const GradGroup& g) {
      return g.device == values.device() && g.dtype == values.scalar_type();
    });
    if (it == groups.end()) {
      groups.push_back({values.device(), values.scalar_type(), {}});
      it = std::prev(groups.end());
    }
    it->grads.push_back(values);
  }
  return groups;
}

std::vector<torch::Tensor> all_parameters(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> parameters;
  for (const auto& group : optimizer.param_groups()) {
    parameters.insert(parameters.end(), group.params().begin(), group.params().end());
  }
  return parameters;
}

// state_dict[key] as a number; CheckpointError naming the key otherwise.
c10::IValue entry(const c10::impl::GenericDict& dict, const char* key, bool integral) {
  const auto it = dict.find(c10::IValue(std::string(key)));
  RANKWISE_CHECK(it != dict.end(), CheckpointError, core::here(),
                 "GradScaler::load_state_dict: the state has no key \"{}\"; expected a "
                 "GradScaler.state_dict() (scale, growth_factor, backoff_factor, growth_interval, "
                 "_growth_tracker)",
                 key);
  const auto& value = it->value();
  RANKWISE_CHECK(value.isInt() || (!integral && value.isDouble()), CheckpointError, core::here(),
                 "GradScaler::load_state_dict: \"{}\" is a {}; expected {}", key,
                 value.tagKind(), integral ? "an int" : "a float");
  return value;
}

double number(const c10::impl::GenericDict& dict, const char* key) {
  const auto value = entry(dict, key, false);
  return value.isInt() ? static_cast<double>(value.toInt()) : value.toDouble();
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : GradScaler(std::move(options), nullptr) {
  default_group_ = true;
}

GradScaler::GradScaler(GradScalerOptions options, dist::ProcessGroup* group)
    : options_(std::move(options)), default_group_(false), group_(group) {
  if (!options_.enabled()) return;
  RANKWISE_CHECK(options_.growth_factor() > 1.0, ConfigError, core::here(),
                 "GradScaler: growth_factor is {}; it must be > 1.0", options_.growth_factor());
  RANKWISE_CHECK(options_.backoff_factor() < 1.0, ConfigError, core::here(),
                 "GradScaler: backoff_factor is {}; it must be < 1.0", options_.backoff_factor());
}

dist::ProcessGroup* GradScaler::group() const {
  if (!default_group_) return group_;
  return dist::is_initialized() && dist::world_size() > 1 ? &dist::process_group() : nullptr;
}

void GradScaler::check_scale_exists(const char* operation) const {
  RANKWISE_CHECK(scale_.defined(), Error, core::here(),
                 "GradScaler::{}: no scale yet; call scaler.scale(loss) (and backward()) earlier "
                 "in the iteration",
                 operation);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  if (!options_.enabled()) return loss;
  if (!scale_.defined()) {
    const auto on = torch::TensorOptions().device(loss.device());
    scale_ = torch::full({}, options_.init_scale(), on.dtype(torch::kFloat));
    growth_tracker_ = torch::full({}, init_growth_tracker_, on.dtype(torch::kInt));
  }
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  unscale_parameters(&optimizer, all_parameters(optimizer));
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  return step_parameters(&optimizer, all_parameters(optimizer), [&optimizer] { optimizer.step(); });
}

void GradScaler::unscale_parameters(const void* optimizer,
                                    const std::vector<torch::Tensor>& parameters) {
  if (!options_.enabled()) return;
  check_scale_exists("unscale_");
  auto& state = optimizers_[optimizer];
  RANKWISE_CHECK(state.stage != Stage::kUnscaled, Error, core::here(),
                 "GradScaler::unscale_: already called for this optimizer since the last "
                 "update(); call it at most once per iteration, before step()");
  RANKWISE_CHECK(state.stage != Stage::kStepped, Error, core::here(),
                 "GradScaler::unscale_: called after step(); call it before step() (or not at "
                 "all: step() unscales)");
  torch::NoGradGuard no_grad;
  // The reciprocal in double, as Python (float32 division may be inexact).
  const auto inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  auto flags = torch::zeros({2}, scale_.options().dtype(torch::kFloat));
  const auto groups = grads_by_device_and_dtype(parameters);
  for (const auto& group : groups) {
    auto found_inf = torch::zeros({}, torch::TensorOptions().device(group.device).dtype(torch::kFloat));
    kernels::non_finite_check_and_unscale_(group.grads, found_inf,
                                           inv_scale.to(group.device, /*non_blocking=*/true));
    flags[0].add_(found_inf.to(scale_.device(), /*non_blocking=*/true));
  }
  if (groups.empty()) flags[1].fill_(1);
  if (auto* pg = this->group()) pg->all_reduce(flags, dist::ReduceOp::kMax);
  state.flags = flags;
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step_parameters(const void* optimizer,
                                 const std::vector<torch::Tensor>& parameters,
                                 const std::function<void()>& optimizer_step) {
  if (!options_.enabled()) {
    optimizer_step();
    return true;
  }
  check_scale_exists("step");
  RANKWISE_CHECK(optimizers_[optimizer].stage != Stage::kStepped, Error, core::here(),
                 "GradScaler::step: already called for this optimizer since the last update(); "
                 "call update() once per iteration, after step()");
  if (optimizers_[optimizer].stage == Stage::kReady) unscale_parameters(optimizer, parameters);
  auto& state = optimizers_[optimizer];
  const auto flags = state.flags.to(torch::kCPU);
  RANKWISE_CHECK(flags[1].item<float>() == 0.0f, Error, core::here(),
                 "GradScaler::step: no parameter of this optimizer has a gradient (on this rank "
                 "or another of the group); call backward() on scaler.scale(loss) first");
  const bool stepped = flags[0].item<float>() == 0.0f;
  if (stepped) optimizer_step();
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  check_scale_exists("update");
  torch::Tensor found_inf;
  for (const auto& [optimizer, state] : optimizers_) {
    if (!state.flags.defined()) continue;
    const auto flag = state.flags[0];
    found_inf = found_inf.defined() ? found_inf + flag : flag.clone();
  }
  RANKWISE_CHECK(found_inf.defined(), Error, core::here(),
                 "GradScaler::update: no optimizer was unscaled since the last update(); call "
                 "scaler.step(optimizer) first");
  kernels::update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor(),
                         options_.backoff_factor(), options_.growth_interval());
  optimizers_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled()) return;
  check_scale_exists("update");
  scale_.fill_(new_scale);
  optimizers_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled()) return 1.0;
  return scale_.defined() ? static_cast<double>(scale_.item<float>()) : options_.init_scale();
}

int64_t GradScaler::get_growth_tracker() const {
  if (!options_.enabled()) return 0;
  return growth_tracker_.defined() ? static_cast<int64_t>(growth_tracker_.item<int>())
                                   : init_growth_tracker_;
}

c10::impl::GenericDict GradScaler::state_dict() const {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  if (!options_.enabled()) return state;
  state.insert(std::string("scale"), get_scale());
  state.insert(std::string("growth_factor"), options_.growth_factor());
  state.insert(std::string("backoff_factor"), options_.backoff_factor());
  state.insert(std::string("growth_interval"), options_.growth_interval());
  state.insert(std::string("_growth_tracker"), get_growth_tracker());
  return state;
}

void GradScaler::load_state_dict(const c10::IValue& state_dict) {
  if (!options_.enabled()) return;
  RANKWISE_CHECK(state_dict.isGenericDict(), CheckpointError, core::here(),
                 "GradScaler::load_state_dict: the state is a {}, not a dict", state_dict.tagKind());
  const auto dict = state_dict.toGenericDict();
  RANKWISE_CHECK(!dict.empty(), CheckpointError, core::here(),
                 "GradScaler::load_state_dict: the state is empty, as a disabled GradScaler saves "
                 "it; load a state saved by an enabled one");
  const double scale = number(dict, "scale");
  const double growth_factor = number(dict, "growth_factor");
  const double backoff_factor = number(dict, "backoff_factor");
  const int64_t growth_interval = entry(dict, "growth_interval", true).toInt();
  const int64_t growth_tracker = entry(dict, "_growth_tracker", true).toInt();
  options_.init_scale(scale).growth_factor(growth_factor).backoff_factor(backoff_factor)
      .growth_interval(growth_interval);
  init_growth_tracker_ = growth_tracker;
  if (scale_.defined()) scale_.fill_(scale);
  if (growth_tracker_.defined()) growth_tracker_.fill_(growth_tracker);
}

}  // namespace rankwise::amp
