#include "checkpoint/sharded/object_record.h"

#include "core/check.h"

#include "checkpoint/pickle/torch_save_pickle.h"
#include "checkpoint/torch_save/archive.h"
#include "checkpoint/torch_save/checkpoint_file.h"
#include "checkpoint/pickle/unpickled_value.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::sharded {

std::vector<char> object_record_bytes(const c10::IValue& value, const std::string& key) {
  bool has_tensor = false;
  pickle::for_each_value(value, [&](const c10::IValue& v) { has_tensor = has_tensor || v.isTensor(); });
  if (has_tensor) {
    core::raise<CheckpointError>(
        "save_sharded: the object entry '{}' holds a tensor; store tensors as ShardedTensor or "
        "replicated tensor entries",
        key);
  }
  try {
    std::vector<char> bytes;
    const auto append = [&](const char* data, std::size_t size) { bytes.insert(bytes.end(), data, data + size); };
    torch_save::write_torch_save_archive(pickle::torch_save_pickle(value).bytes, {}, append);
    return bytes;
  } catch (const std::exception& e) {
    core::raise<CheckpointError>("save_sharded: the object entry '{}' (a {}) cannot be pickled: {}",
                                 key, value.tagKind(), e.what());
  }
}

c10::IValue object_from_record(const std::string& bytes, const std::string& what) {
  // The reader of checkpoint files, hardened for files from anywhere: its
  // pickle is walked opcode by opcode before libtorch's Unpickler sees it.
  return torch_save::read_checkpoint_bytes(bytes, what);
}

}  // namespace rankwise::checkpoint::sharded
