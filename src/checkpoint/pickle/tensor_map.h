#pragma once
// Every tensor of a checkpoint value replaced by a function of it: what
// to_device() and the asynchronous save's snapshot share.
#include <ATen/core/ivalue.h>

#include <functional>

namespace rankwise::checkpoint::pickle {

/// `value` with every tensor in it (nested in dicts, lists and tuples too)
/// replaced by `map(tensor)`, in the order the pickler meets them; other
/// values are kept. Containers are rebuilt, never changed in place (c10's
/// dicts and lists are shared by reference), so `value` is left as it was.
c10::IValue map_tensors(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& map);

}  // namespace rankwise::checkpoint::pickle
