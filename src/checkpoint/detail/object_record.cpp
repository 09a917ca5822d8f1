#include "checkpoint/detail/object_record.h"

#include <torch/serialize.h>

#include "checkpoint/detail/checkpoint_file.h"
#include "checkpoint/detail/unpickled_value.h"
#include "rankwise/error.h"

namespace rankwise::detail {

std::vector<char> object_record_bytes(const c10::IValue& value, const std::string& key) {
  bool has_tensor = false;
  for_each_value(value, [&](const c10::IValue& v) { has_tensor = has_tensor || v.isTensor(); });
  if (has_tensor) {
    throw CheckpointError("rankwise: save_sharded: the object entry '" + key +
                          "' holds a tensor; store tensors as ShardedTensor or replicated tensor entries");
  }
  try {
    return torch::pickle_save(value);
  } catch (const std::exception& e) {
    throw CheckpointError("rankwise: save_sharded: the object entry '" + key + "' (a " + value.tagKind() +
                          ") cannot be pickled: " + e.what());
  }
}

c10::IValue object_from_record(const std::string& bytes, const std::string& what) {
  // The reader of checkpoint files, hardened for files from anywhere: its
  // pickle is walked opcode by opcode before libtorch's Unpickler sees it.
  return read_checkpoint_bytes(bytes, what);
}

}  // namespace rankwise::detail
