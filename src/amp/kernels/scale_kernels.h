#pragma once
// The two kernels of GradScaler: ATen's own where this libtorch has them for
// the tensors' device (CUDA in 1.13 and 2.x, the CPU from about 2.3 on),
// else the same computation in plain tensor ops, which gives the same values
// (tests/unit/amp/kernels/scale_kernels_test.cpp). Neither waits on the
// device (no .item()).
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <vector>

namespace rankwise::amp::kernels {

/// Whether ATen registers _amp_foreach_non_finite_check_and_unscale_ and
/// _amp_update_scale_ for `device_type` (asked of the dispatcher once).
bool aten_has_kernels(c10::DeviceType device_type);

/// For every tensor of `grads` (one device and dtype): sets `found_inf`
/// (float32, one element, on that device) to 1 when it holds an inf or a nan
/// (checked before scaling), then multiplies it in place by `inv_scale`
/// (float32, one element, same device). ATen's
/// _amp_foreach_non_finite_check_and_unscale_ or the fallback.
void non_finite_check_and_unscale_(const std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                                   const at::Tensor& inv_scale);

/// The dynamic scale's update, in place: on `found_inf` != 0, scale *=
/// backoff_factor and growth_tracker = 0; else growth_tracker += 1, and when
/// it reaches growth_interval, scale *= growth_factor (kept if that is not
/// finite) and growth_tracker = 0. scale: float32, growth_tracker: int32,
/// found_inf: float32, one element each, on one device. ATen's
/// _amp_update_scale_ or the fallback.
void update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval);

/// The fallbacks themselves, on any device, whatever ATen has.
void fallback_non_finite_check_and_unscale_(const std::vector<at::Tensor>& grads,
                                            at::Tensor& found_inf, const at::Tensor& inv_scale);
void fallback_update_scale_(at::Tensor& scale, at::Tensor& growth_tracker,
                            const at::Tensor& found_inf, double growth_factor,
                            double backoff_factor, int64_t growth_interval);

/// While one exists, the two dispatching functions above use the fallbacks
/// on every device (so tests run a whole GradScaler through them where ATen
/// has the kernels). Not thread-safe against concurrent scalers.
class ForceFallback {
 public:
  ForceFallback();
  ~ForceFallback();
  ForceFallback(const ForceFallback&) = delete;
  ForceFallback& operator=(const ForceFallback&) = delete;

 private:
  bool previous_;
};

}  // namespace rankwise::amp::kernels
