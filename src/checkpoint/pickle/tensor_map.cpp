#include "checkpoint/pickle/tensor_map.h"

#include <vector>

namespace rankwise::checkpoint::pickle {

c10::IValue map_tensors(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& map) {
  if (value.isTensor()) return map(value.toTensor());
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict result(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) result.insert(entry.key(), map_tensors(entry.value(), map));
    return result;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> result;
    for (const at::Tensor& t : value.toTensorVector()) result.push_back(map(t));
    return result;
  }
  if (value.isList()) {
    const auto list = value.toList();
    c10::impl::GenericList result(list.elementType());
    for (const c10::IValue& element : list) result.push_back(map_tensors(element, map));
    return result;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(map_tensors(element, map));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

}  // namespace rankwise::checkpoint::pickle
