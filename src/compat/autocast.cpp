#include "compat/autocast.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

namespace rankwise::compat {

namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool is_enabled(c10::DeviceType type) { return at::autocast::is_autocast_enabled(type); }
void set_enabled(c10::DeviceType type, bool on) { at::autocast::set_autocast_enabled(type, on); }
c10::ScalarType get_dtype(c10::DeviceType type) { return at::autocast::get_autocast_dtype(type); }
void set_dtype(c10::DeviceType type, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(type, dtype);
}
#else
bool is_enabled(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void set_enabled(c10::DeviceType type, bool on) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
}
c10::ScalarType get_dtype(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                      : at::autocast::get_autocast_gpu_dtype();
}
void set_dtype(c10::DeviceType type, c10::ScalarType dtype) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);  // 1.13: throws on anything but bfloat16
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype)
    : device_type_(device_type),
      previous_enabled_(is_enabled(device_type)),
      previous_dtype_(get_dtype(device_type)) {
  if (dtype) set_dtype(device_type, *dtype);
  set_enabled(device_type, dtype.has_value());
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_type_, previous_enabled_);
  set_dtype(device_type_, previous_dtype_);
}

bool autocast_supports(c10::DeviceType device_type, c10::ScalarType dtype) {
  const c10::ScalarType previous = get_dtype(device_type);
  try {
    set_dtype(device_type, dtype);
  } catch (const c10::Error&) {
    return false;
  }
  set_dtype(device_type, previous);
  return true;
}

void clear_autocast_cache() { at::autocast::clear_cache(); }

}  // namespace rankwise::compat
