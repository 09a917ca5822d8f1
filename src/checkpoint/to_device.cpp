// rankwise::checkpoint::to_device and load(path, device): map_location for checkpoints.
#include <ATen/ATen.h>

#include "rankwise/checkpoint/checkpoint.h"

#include "checkpoint/pickle/tensor_map.h"

namespace rankwise::checkpoint {

Checkpoint to_device(const Checkpoint& checkpoint, const c10::Device& device) {
  Checkpoint result;
  for (const auto& entry : checkpoint.dict()) {
    result.insert(entry.key().toStringRef(),
                  pickle::map_tensors(entry.value(), [&](const at::Tensor& t) { return t.to(device); }));
  }
  return result;
}

Checkpoint load(const std::string& path, const c10::Device& device) {
  return to_device(load(path), device);
}

}  // namespace rankwise::checkpoint
