// rankwise::checkpoint::to_device and load(path, device): map_location for checkpoints.
#include <ATen/ATen.h>

#include "rankwise/checkpoint/checkpoint.h"

namespace rankwise::checkpoint {
namespace {

// `value` with every tensor in it on `device`; containers are rebuilt, never
// changed in place (c10's dicts and lists are shared by reference).
c10::IValue on_device(const c10::IValue& value, const c10::Device& device) {
  if (value.isTensor()) return value.toTensor().to(device);
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict result(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) result.insert(entry.key(), on_device(entry.value(), device));
    return result;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> result;
    for (const at::Tensor& t : value.toTensorVector()) result.push_back(t.to(device));
    return result;
  }
  if (value.isList()) {
    const auto list = value.toList();
    c10::impl::GenericList result(list.elementType());
    for (const c10::IValue& element : list) result.push_back(on_device(element, device));
    return result;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) {
      elements.push_back(on_device(element, device));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

}  // namespace

Checkpoint to_device(const Checkpoint& checkpoint, const c10::Device& device) {
  Checkpoint result;
  for (const auto& entry : checkpoint.dict()) {
    result.insert(entry.key().toStringRef(), on_device(entry.value(), device));
  }
  return result;
}

Checkpoint load(const std::string& path, const c10::Device& device) {
  return to_device(load(path), device);
}

}  // namespace rankwise::checkpoint
