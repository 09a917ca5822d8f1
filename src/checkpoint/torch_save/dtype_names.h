#pragma once
/// How Python names each dtype rankwise stores in DCP checkpoints: the
/// attribute of `torch` (`torch.float32`, as pickle writes a dtype) and the
/// legacy typed-storage class torch.save's data.pkl names (`torch.FloatStorage`),
/// from PyTorch's torch/_utils.py and torch/storage.py (checked against torch 2.15.0).
#include <c10/core/ScalarType.h>

#include <string>

namespace rankwise::checkpoint::torch_save {

struct DtypeNames {
  c10::ScalarType type;
  const char* dtype;    ///< "float32": torch.float32
  const char* storage;  ///< "FloatStorage": torch.FloatStorage
};

inline constexpr DtypeNames kDtypeNames[] = {
    {c10::ScalarType::Float, "float32", "FloatStorage"},
    {c10::ScalarType::Double, "float64", "DoubleStorage"},
    {c10::ScalarType::Half, "float16", "HalfStorage"},
    {c10::ScalarType::BFloat16, "bfloat16", "BFloat16Storage"},
    {c10::ScalarType::Long, "int64", "LongStorage"},
    {c10::ScalarType::Int, "int32", "IntStorage"},
    {c10::ScalarType::Short, "int16", "ShortStorage"},
    {c10::ScalarType::Char, "int8", "CharStorage"},
    {c10::ScalarType::Byte, "uint8", "ByteStorage"},
    {c10::ScalarType::Bool, "bool", "BoolStorage"},
    {c10::ScalarType::ComplexFloat, "complex64", "ComplexFloatStorage"},
    {c10::ScalarType::ComplexDouble, "complex128", "ComplexDoubleStorage"},
};

/// The entry of `type`, or null when DCP files of rankwise do not hold it.
inline const DtypeNames* dtype_names(c10::ScalarType type) {
  for (const auto& n : kDtypeNames) {
    if (n.type == type) return &n;
  }
  return nullptr;
}

/// The entry whose dtype name (`by_storage` false) or storage class name
/// (true) is `name`, or null.
inline const DtypeNames* dtype_names(const std::string& name, bool by_storage) {
  for (const auto& n : kDtypeNames) {
    if (name == (by_storage ? n.storage : n.dtype)) return &n;
  }
  return nullptr;
}

}  // namespace rankwise::checkpoint::torch_save
