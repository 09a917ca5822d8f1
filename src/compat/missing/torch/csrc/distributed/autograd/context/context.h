#pragma once
// Debian's libtorch-dev 1.13 ships torch/csrc/distributed/c10d/reducer.hpp but
// not this header, which reducer.hpp includes for two type names only. This
// stub declares them as libtorch does (torch/csrc/distributed/autograd/context/
// context.h, PyTorch 1.13): the Reducer stores a std::shared_ptr to the
// context, so the class layout does not depend on the context's definition.
// Its directory (src/compat/missing) is on src/parallel/ddp/ddp.cpp's include path
// only when the libtorch found lacks the real header (cmake/torch_compat.cmake);
// never installed.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
