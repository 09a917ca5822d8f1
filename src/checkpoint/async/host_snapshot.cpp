#include "checkpoint/async/host_snapshot.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "checkpoint/pickle/tensor_map.h"

namespace rankwise::checkpoint::async {
namespace {

bool copied_by_storage(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.has_storage() && !t.is_conj() && !t.is_neg() &&
         (t.device().is_cpu() || t.device().is_cuda());
}

}  // namespace

at::Tensor HostSnapshot::buffer_for(std::size_t index, int64_t bytes, bool pinned) {
  if (index < buffers_.size() && buffers_[index].tensor.numel() == bytes && buffers_[index].pinned == pinned) {
    return buffers_[index].tensor;
  }
  ++allocations_;
  Buffer buffer{at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned)), pinned};
  if (index < buffers_.size()) {
    buffers_[index] = buffer;
  } else {
    buffers_.push_back(buffer);
  }
  return buffer.tensor;
}

c10::IValue HostSnapshot::take(const c10::IValue& value) {
  // Keyed as the pickler dedupes storages: by their StorageImpl.
  std::unordered_map<const c10::StorageImpl*, at::Tensor> copies;  // source storage -> its copy (uint8)
  devices_.clear();
  auto copy = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined()) return t;  // the writer names it
    if (!copied_by_storage(t)) return t.detach().clone().requires_grad_(t.requires_grad());
    const c10::Storage& storage = t.storage();
    auto found = copies.find(storage.unsafeGetStorageImpl());
    if (found == copies.end()) {
      const auto bytes = static_cast<int64_t>(storage.nbytes());
      at::Tensor buffer = buffer_for(copies.size(), bytes, storage.device().is_cuda());
      if (storage.device().is_cuda()) {
        auto whole = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage.device()));
        whole.set_(storage, 0, {bytes}, {1});
        buffer.copy_(whole, /*non_blocking=*/true);
        record_device(storage.device().index());
      } else if (bytes > 0) {
        std::memcpy(buffer.data_ptr(), storage.data(), static_cast<std::size_t>(bytes));
      }
      found = copies.emplace(storage.unsafeGetStorageImpl(), buffer).first;
    }
    auto view = at::empty({0}, t.options().device(at::kCPU).pinned_memory(false).requires_grad(false));
    view.set_(found->second.storage(), t.storage_offset(), t.sizes(), t.strides());
    return view.requires_grad_(t.requires_grad());
  };
  return pickle::map_tensors(value, copy);
}

std::vector<at::Tensor> HostSnapshot::take_each(const std::vector<at::Tensor>& tensors) {
  devices_.clear();
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    const bool cuda = t.device().is_cuda();
    const auto bytes = static_cast<int64_t>(t.numel() * static_cast<int64_t>(t.element_size()));
    at::Tensor buffer = buffer_for(out.size(), bytes, cuda);
    auto copy = at::empty({0}, t.options().device(at::kCPU).pinned_memory(false).requires_grad(false));
    copy.set_(buffer.storage(), 0, t.sizes());  // contiguous
    if (cuda) {
      copy.copy_(t, /*non_blocking=*/true);
      record_device(t.device().index());
    } else if (t.is_contiguous() && !t.is_conj() && !t.is_neg() && t.layout() == at::kStrided) {
      if (bytes > 0) std::memcpy(buffer.data_ptr(), t.data_ptr(), static_cast<std::size_t>(bytes));
    } else {
      copy.copy_(t);
    }
    out.push_back(copy.requires_grad_(t.requires_grad()));
  }
  return out;
}

void HostSnapshot::record_device(c10::DeviceIndex index) {
  if (std::find(devices_.begin(), devices_.end(), index) == devices_.end()) devices_.push_back(index);
}

void HostSnapshot::wait_for_device_copies() const {
  for (const c10::DeviceIndex index : devices_) torch::cuda::synchronize(index);
}

int64_t HostSnapshot::bytes() const {
  int64_t total = 0;
  for (const auto& buffer : buffers_) total += buffer.tensor.numel();
  return total;
}

}  // namespace rankwise::checkpoint::async
