#pragma once
/// Pickles written by Python's torch.save, made readable by libtorch 1.13's
/// Unpickler, which turns `collections.OrderedDict` into None, cannot BUILD
/// a dict, and knows neither SETITEM nor APPEND (pytorch/pytorch#37213,
/// #100741; fixed upstream in #139750). Every `model.state_dict()` that
/// Python's torch.save writes is such an OrderedDict (with a `_metadata`
/// attribute set through BUILD), and any one-entry dict is a SETITEM.
///
/// adapt_python_pickle() walks the pickle's opcodes (protocol 2, as
/// torch.save writes) keeping a model of the stack, and rewrites
///   GLOBAL collections.OrderedDict | BINGET of it, EMPTY_TUPLE, REDUCE  ->  EMPTY_DICT
///   BUILD with such a dict below its state    ->  MARK key state SETITEMS
///   key value SETITEM                         ->  MARK key value SETITEMS
///   item APPEND                               ->  MARK item APPENDS
/// so an OrderedDict's attributes land under kPickleStateKey, which
/// strip_pickle_state() then removes from the unpickled value.
///
/// The walk is also the guard for libtorch's Unpickler, which trusts its
/// input (it pops an empty stack, reads past a MARK, sizes its memo table by
/// any index: undefined behaviour on a crafted file). It follows Python's
/// stricter rules and refuses what breaks them, so every pickle passes it
/// before libtorch reads it: check_pickle() for rankwise's own.
#include <ATen/core/ivalue.h>

#include <string>

namespace rankwise::checkpoint::pickle {

constexpr const char* kPickleStateKey = "__rankwise_ordered_dict_state__";

/// The rewritten pickle. Throws CheckpointError when an opcode is unknown,
/// the OrderedDict class is used other than by torch.save's pattern, or the
/// pickle is malformed (truncated, stack underflow, unbalanced MARK, memo
/// index out of range, not exactly one value at STOP).
/// `path` names the file in the message.
std::string adapt_python_pickle(const char* pickle, std::size_t size, const std::string& path);

/// Walks `pickle` as adapt_python_pickle() does, without rewriting it: throws
/// CheckpointError where that would.
void check_pickle(const char* pickle, std::size_t size, const std::string& path);

/// Removes kPickleStateKey entries from every dict inside `value` (cyclic
/// and deeply nested values included).
void strip_pickle_state(const c10::IValue& value);

}  // namespace rankwise::checkpoint::pickle
