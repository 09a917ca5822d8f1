#pragma once
// The key of a parameter in torch::optim::Optimizer::state(): libtorch 1.13
// keys it by the address of its TensorImpl as a string (what
// c10::guts::to_string, gone in 2.x, wrote: the pointer through an
// ostream), later releases by the address itself (void*). Chosen from the
// map's key type at compile time. Used only by src/checkpoint/state/optimizer_state.cpp.
#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace rankwise::compat {

/// The key of `param` in `state` (an Optimizer::state() map).
template <class Map>
typename Map::key_type optimizer_state_key(const Map& /*state*/, const at::Tensor& param) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace rankwise::compat
