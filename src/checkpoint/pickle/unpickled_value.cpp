#include "checkpoint/pickle/unpickled_value.h"

#include "core/check.h"

#include <fmt/ranges.h>

#include <ATen/core/Tensor.h>

#include <unordered_set>
#include <vector>

#include "rankwise/error.h"

namespace rankwise::checkpoint::pickle {

void for_each_value(const c10::IValue& root, const std::function<void(const c10::IValue&)>& visit) {
  std::vector<c10::IValue> pending = {root};
  std::unordered_set<const void*> seen;
  while (!pending.empty()) {
    const c10::IValue value = std::move(pending.back());
    pending.pop_back();
    if (value.isPtrType() && !seen.insert(value.internalToPointer()).second) continue;
    visit(value);
    if (value.isGenericDict()) {
      for (const auto& entry : value.toGenericDict()) {
        pending.push_back(entry.key());
        pending.push_back(entry.value());
      }
    } else if (value.isList()) {
      for (const auto& item : value.toListRef()) pending.push_back(item);
    } else if (value.isTuple()) {
      for (const auto& item : value.toTupleRef().elements()) pending.push_back(item);
    }
  }
}

namespace {

// Bytes of storage `t` needs from its storage's start; false on overflow.
bool bytes_needed(const at::Tensor& t, uint64_t& needed) {
  int64_t last = t.storage_offset();  // the element furthest into the storage
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t extent = 0;
    if (__builtin_mul_overflow(t.size(d) - 1, t.stride(d), &extent) ||
        __builtin_add_overflow(last, extent, &last)) {
      return false;
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(last) + 1, t.element_size(), &bytes)) return false;
  needed = bytes;
  return true;
}

std::string describe(const at::Tensor& t) {
  const auto dtype = t.dtype().name();  // what operator<< of a TypeMeta prints
  return fmt::format("a {} tensor of shape [{}], strides [{}] and offset {}", std::string(dtype.data(), dtype.size()),
                     fmt::join(t.sizes(), ", "), fmt::join(t.strides(), ", "), t.storage_offset());
}

}  // namespace

void check_tensor_bounds(const c10::IValue& value, const RecordSizes& records,
                         const std::string& path) {
  for_each_value(value, [&](const c10::IValue& v) {
    if (!v.isTensor()) return;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !t.has_storage() || t.layout() != at::kStrided) return;
    const auto record = records.find(t.storage().data());
    const std::size_t available = record == records.end() ? 0 : record->second;
    bool valid = t.storage_offset() >= 0;
    for (int64_t d = 0; d < t.dim(); ++d) valid = valid && t.size(d) >= 0 && t.stride(d) >= 0;
    uint64_t needed = 0;
    if (valid && t.numel() > 0) valid = bytes_needed(t, needed) && needed <= available;
    if (!valid) {
      core::raise<CheckpointError>(
          "checkpoint '{}' holds {}, which does not fit in its storage record of {} bytes; the "
          "file is corrupt or crafted: do not use it",
          path, describe(t), available);
    }
  });
}

}  // namespace rankwise::checkpoint::pickle
