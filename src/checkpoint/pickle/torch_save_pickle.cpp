#include "checkpoint/pickle/torch_save_pickle.h"

#include <torch/csrc/jit/serialization/pickler.h>

#include <unordered_map>

namespace rankwise::checkpoint::pickle {
namespace {

// Copies of the containers of a value, every list a List[Any] (which the
// Pickler writes as a plain list); a container met twice is copied once, so
// that what the value shares, the pickle shares too.
class GenericContainers {
 public:
  c10::IValue copy(const c10::IValue& value) {
    if (!value.isGenericDict() && !value.isList() && !value.isTuple()) return value;
    const auto done = copies_.find(value.internalToPointer());
    if (done != copies_.end()) return done->second;
    c10::IValue result = copy_container(value);
    copies_.emplace(value.internalToPointer(), result);
    return result;
  }

 private:
  c10::IValue copy_container(const c10::IValue& value) {
    if (value.isGenericDict()) {
      const auto dict = value.toGenericDict();
      c10::impl::GenericDict result(dict.keyType(), c10::AnyType::get());
      for (const auto& entry : dict) result.insert(entry.key(), copy(entry.value()));
      return result;
    }
    if (value.isList()) {
      c10::impl::GenericList result(c10::AnyType::get());
      for (const c10::IValue& element : value.toListRef()) result.push_back(copy(element));
      return result;
    }
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(copy(element));
    return c10::ivalue::Tuple::create(std::move(elements));
  }

  std::unordered_map<const void*, c10::IValue> copies_;
};

}  // namespace

TorchSavePickle torch_save_pickle(const c10::IValue& value) {
  const c10::IValue plain = GenericContainers().copy(value);
  TorchSavePickle result;
  {
    torch::jit::Pickler pickler(
        [&](const char* data, std::size_t size) { result.bytes.append(data, size); },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
        /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
        /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(plain);
    pickler.stop();
    result.storages = pickler.tensorData();
  }
  return result;
}

}  // namespace rankwise::checkpoint::pickle
