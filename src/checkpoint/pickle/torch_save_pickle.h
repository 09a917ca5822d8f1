#pragma once
/// Values pickled as Python's torch.save pickles them, for files that
/// torch.load(weights_only=True), PyTorch 2.6's default, reads: no GLOBAL
/// but the tensor ones its allow-list names (libtorch's Pickler tags typed
/// containers with torch.jit._pickle.restore_type_tag and writes List[int],
/// List[float], List[bool] and List[Tensor] with build_intlist and the like).
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace rankwise::checkpoint::pickle {

struct TorchSavePickle {
  std::string bytes;  ///< the pickle, protocol 2
  /// A tensor of each storage, in the order of the pickle's persistent ids.
  std::vector<at::Tensor> storages;
};

/// `value` pickled without type tags; its lists come back from libtorch's
/// Unpickler as List[Any] and its dicts as Dict[Any, Any], as Python's do.
/// Throws c10::Error for what libtorch's Pickler refuses.
TorchSavePickle torch_save_pickle(const c10::IValue& value);

}  // namespace rankwise::checkpoint::pickle
