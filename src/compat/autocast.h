#pragma once
// Autocast (automatic mixed precision) state, whose ATen API differs between
// the libtorch versions rankwise supports: 1.13 (through 2.3) has one set of
// functions per device (set_cpu_enabled / set_autocast_cpu_dtype for the
// CPU, set_enabled / set_autocast_gpu_dtype for CUDA); 2.4 and later take
// the device type (set_autocast_enabled / set_autocast_dtype) and keep the
// old ones only as deprecated wrappers that warn. Used only by src/fabric/.
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <optional>

namespace rankwise::compat {

/// Python's `torch.autocast(device_type, dtype)` as a scope: while it lives,
/// eligible ops on `device_type` autocast to `dtype`, or, with std::nullopt,
/// autocast is off there (`torch.autocast(..., enabled=False)`). The end
/// restores the previous state and, at the outermost scope, clears
/// autocast's cache of casts, as Python's `__exit__`. Thread-local, as
/// autocast's state is. CPU and CUDA.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool previous_enabled_;
  c10::ScalarType previous_dtype_;
};

/// Whether this libtorch autocasts to `dtype` on `device_type` (libtorch
/// 1.13 refuses float16 on the CPU: bfloat16 only). Changes nothing.
bool autocast_supports(c10::DeviceType device_type, c10::ScalarType dtype);

/// Drops autocast's cached casts of parameters, e.g. after an optimizer step
/// changed the parameters inside one autocast scope.
void clear_autocast_cache();

}  // namespace rankwise::compat
