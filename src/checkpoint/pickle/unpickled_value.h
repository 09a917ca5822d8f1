#pragma once
/// Checks on a value just unpickled from a file that may come from anywhere.
#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <unordered_map>

namespace rankwise::checkpoint::pickle {

/// Calls `visit` on `root` and on every value inside it (dict keys and
/// values, list and tuple elements), each container once, without recursion:
/// safe on deeply nested and on cyclic values (a pickle can make a list that
/// contains itself). `visit` runs before a container's elements are read, so
/// it may remove some of them.
void for_each_value(const c10::IValue& root, const std::function<void(const c10::IValue&)>& visit);

/// The size in bytes of each record read from the file, by its data pointer.
using RecordSizes = std::unordered_map<const void*, std::size_t>;

/// Throws CheckpointError naming `path` when a tensor inside `value` reaches
/// past the end of the record (data/N) that holds its storage, or has a
/// negative size, stride or offset. libtorch 1.13's Unpickler takes a
/// tensor's sizes, strides, dtype and even its storage's byte size from the
/// pickle, never from the record: such a tensor would read and write out of
/// bounds.
void check_tensor_bounds(const c10::IValue& value, const RecordSizes& records,
                         const std::string& path);

}  // namespace rankwise::checkpoint::pickle
