#pragma once
/// One non-tensor value as DCP stores it (BytesStorageMetadata): the bytes
/// torch.save(value) writes for a Python object (int, float, bool, str, None,
/// and tuples, lists and str-keyed dicts of them), one record per value in a
/// `.distcp` file (torch 2.15.0's DefaultSavePlanner.resolve_data and
/// FileSystemWriter, checked against its dcp.save output).
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace rankwise::checkpoint::sharded {

/// The torch.save bytes of `value` (torch_save_pickle.h: what Python's
/// torch.load reads, with weights_only=True too). Throws
/// CheckpointError naming `key` when `value` holds a tensor (tensors are
/// entries of their own) or something libtorch cannot pickle.
std::vector<char> object_record_bytes(const c10::IValue& value, const std::string& key);

/// The value of a torch.save record, read as checkpoint files are
/// (read_checkpoint_bytes: the pickle checked opcode by opcode before
/// libtorch's Unpickler runs). Throws CheckpointError naming `what` when the
/// bytes are not such a record or hold a Python object libtorch cannot
/// rebuild (a class other than the builtins).
c10::IValue object_from_record(const std::string& bytes, const std::string& what);

}  // namespace rankwise::checkpoint::sharded
