#include "fabric/training_state_entries.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "dist/all_gather_ivalues.h"
#include "rankwise/error.h"

namespace rankwise::fabric {
namespace {

// What stands for a tensor inside an object entry.
constexpr const char* kTensorMarker = "rankwise.tensor";

std::string key_text(const c10::IValue& key) {
  if (key.isString()) return key.toStringRef();
  if (key.isInt()) return std::to_string(key.toInt());
  return fmt::format("{}", key.tagKind());
}

// `value` with each tensor replaced by {"rankwise.tensor": key}, the tensor
// (on the CPU) added to `state` under that key: `path` and the dict keys and
// list indices that lead to it, joined by dots (and "#n" when taken).
c10::IValue without_tensors(const c10::IValue& value, const std::string& path, checkpoint::ShardedState& state) {
  if (value.isTensor()) {
    std::string key = path;
    for (int n = 1; state.count(key) != 0; ++n) key = fmt::format("{}#{}", path, n);
    state.emplace(key, value.toTensor().detach().cpu());
    c10::impl::GenericDict marker(c10::StringType::get(), c10::StringType::get());
    marker.insert(kTensorMarker, key);
    return marker;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    for (const auto& item : dict) {
      out.insert(item.key(), without_tensors(item.value(), path + "." + key_text(item.key()), state));
    }
    return out;
  }
  if (value.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    const auto items = value.toListRef();
    for (std::size_t i = 0; i < items.size(); ++i) {
      out.push_back(without_tensors(items[i], fmt::format("{}.{}", path, i), state));
    }
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> out;
    const auto& items = value.toTupleRef().elements();
    for (std::size_t i = 0; i < items.size(); ++i) {
      out.push_back(without_tensors(items[i], fmt::format("{}.{}", path, i), state));
    }
    return c10::ivalue::Tuple::create(std::move(out));
  }
  return value;
}

// The key a marker refers to, or nullptr when `value` is not one.
const std::string* marked_key(const c10::IValue& value) {
  if (!value.isGenericDict()) return nullptr;
  const auto dict = value.toGenericDict();
  if (dict.size() != 1) return nullptr;
  const auto item = dict.begin();
  if (!item->key().isString() || item->key().toStringRef() != kTensorMarker || !item->value().isString()) {
    return nullptr;
  }
  return &item->value().toStringRef();
}

// The inverse of without_tensors(): each marker replaced by its tensor.
c10::IValue with_tensors(const c10::IValue& value, const checkpoint::ShardedState& loaded) {
  if (const std::string* key = marked_key(value)) {
    const auto it = loaded.find(*key);
    const auto* tensor = it == loaded.end() ? nullptr : std::get_if<at::Tensor>(&it->second);
    if (tensor == nullptr) {
      core::raise<CheckpointError>(
          "the sharded checkpoint's training state refers to the tensor entry '{}', which it does "
          "not hold as a replicated tensor",
          *key);
    }
    return *tensor;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    for (const auto& item : dict) out.insert(item.key(), with_tensors(item.value(), loaded));
    return out;
  }
  if (value.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    for (const auto& item : value.toListRef()) out.push_back(with_tensors(item, loaded));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> out;
    for (const auto& item : value.toTupleRef().elements()) out.push_back(with_tensors(item, loaded));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  return value;
}

}  // namespace

checkpoint::ShardedState training_state_entries(const checkpoint::Checkpoint& captured) {
  checkpoint::ShardedState state;
  for (const std::string& name : captured.keys()) {
    c10::IValue value = captured.at(name);
    if (name == "extras") value = dist::all_gather_ivalues(value).get(0);  // rank 0's
    const std::string key = kTrainingPrefix + name;
    state.emplace(key, checkpoint::ObjectEntry{});  // taken before its tensors' keys
    std::get<checkpoint::ObjectEntry>(state.at(key)).value = without_tensors(value, key, state);
  }
  return state;
}

checkpoint::ShardedState training_state_to_load(const StoredKeys& stored) {
  checkpoint::ShardedState state;
  const std::string prefix = kTrainingPrefix;
  for (const auto& [key, entry] : stored) {
    if (key.rfind(prefix, 0) != 0) continue;
    if (entry.is_tensor) {
      state.emplace(key, at::zeros(entry.global_shape, at::TensorOptions().dtype(entry.dtype)));
    } else {
      state.emplace(key, checkpoint::ObjectEntry{});
    }
  }
  return state;
}

checkpoint::Checkpoint training_state_from(const checkpoint::ShardedState& loaded) {
  checkpoint::Checkpoint checkpoint;
  const std::string prefix = kTrainingPrefix;
  for (const auto& [key, entry] : loaded) {
    const auto* object = std::get_if<checkpoint::ObjectEntry>(&entry);
    if (object == nullptr || key.rfind(prefix, 0) != 0) continue;
    checkpoint.insert(key.substr(prefix.size()), with_tensors(object->value, loaded));
  }
  return checkpoint;
}

}  // namespace rankwise::fabric
