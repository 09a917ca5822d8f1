#include "amp/kernels/scale_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>

namespace rankwise::amp::kernels {

namespace {

std::atomic<bool> force_fallback{false};

bool has_kernel(const char* op, c10::DispatchKey key) {
  const auto handle = c10::Dispatcher::singleton().findSchema({op, ""});
  return handle.has_value() && handle->hasKernelForDispatchKey(key);
}

bool has_both(c10::DispatchKey key) {
  return has_kernel("aten::_amp_foreach_non_finite_check_and_unscale_", key) &&
         has_kernel("aten::_amp_update_scale_", key);
}

bool use_aten(const at::Tensor& on) {
  return !force_fallback.load() && aten_has_kernels(on.device().type());
}

}  // namespace

bool aten_has_kernels(c10::DeviceType device_type) {
  static const bool cpu = has_both(c10::DispatchKey::CPU);
  static const bool cuda = has_both(c10::DispatchKey::CUDA);
  switch (device_type) {
    case c10::DeviceType::CPU:
      return cpu;
    case c10::DeviceType::CUDA:
      return cuda;
    default:
      return false;
  }
}

void non_finite_check_and_unscale_(const std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                                   const at::Tensor& inv_scale) {
  if (grads.empty()) return;
  if (use_aten(grads.front())) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  } else {
    fallback_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  }
}

void update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (use_aten(scale)) {
    at::_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                           growth_interval);
  } else {
    fallback_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                           growth_interval);
  }
}

void fallback_non_finite_check_and_unscale_(const std::vector<at::Tensor>& grads,
                                            at::Tensor& found_inf, const at::Tensor& inv_scale) {
  at::NoGradGuard no_grad;
  const auto flag_shape = found_inf.sizes();
  for (const auto& grad : grads) {
    // As ATen: the check reads the values before scaling; every value is scaled.
    const auto non_finite = at::logical_not(at::isfinite(grad)).any().to(at::kFloat);
    found_inf.copy_(at::maximum(found_inf, non_finite.reshape(flag_shape)));
    auto g = grad;
    g.mul_(inv_scale.reshape({}));
  }
}

void fallback_update_scale_(at::Tensor& scale, at::Tensor& growth_tracker,
                            const at::Tensor& found_inf, double growth_factor,
                            double backoff_factor, int64_t growth_interval) {
  at::NoGradGuard no_grad;
  // ATen computes scale * factor in double and stores it as float.
  const auto found = found_inf.reshape(scale.sizes()).ne(0);
  const auto backed_off = (scale.to(at::kDouble) * backoff_factor).to(at::kFloat);
  const auto grown = (scale.to(at::kDouble) * growth_factor).to(at::kFloat);
  const auto successful = growth_tracker + 1;
  const auto reached = successful.eq(growth_interval).reshape(scale.sizes());
  const auto zero = at::zeros_like(growth_tracker);
  const auto new_scale =
      at::where(found, backed_off, at::where(reached.logical_and(at::isfinite(grown)), grown, scale));
  const auto new_tracker = at::where(found.reshape(growth_tracker.sizes()), zero,
                                     at::where(reached.reshape(growth_tracker.sizes()), zero, successful));
  scale.copy_(new_scale);
  growth_tracker.copy_(new_tracker);
}

ForceFallback::ForceFallback() : previous_(force_fallback.exchange(true)) {}

ForceFallback::~ForceFallback() { force_fallback.store(previous_); }

}  // namespace rankwise::amp::kernels
