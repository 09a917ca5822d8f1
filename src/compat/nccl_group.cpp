#include "compat/nccl_group.h"

#include <stdexcept>

// RANKWISE_TORCH_NCCL: set for this file by CMakeLists.txt when the libtorch
// found has CUDA; USE_C10D_NCCL: defined by libtorch's torch_cuda target, and
// the guard of ProcessGroupNCCL.hpp.
#if defined(RANKWISE_TORCH_NCCL) && defined(USE_C10D_NCCL) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>)
#define RANKWISE_HAS_NCCL 1
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define RANKWISE_HAS_NCCL 0
#endif

namespace rankwise::compat {

bool nccl_compiled() { return RANKWISE_HAS_NCCL != 0; }

#if RANKWISE_HAS_NCCL

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_nccl_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options, c10::Device device,
    std::chrono::milliseconds timeout) {
  c10::cuda::set_device(device.index());
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  // Before setBackend, which hands the bound device to each backend.
  group->setBoundDeviceId(device);
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("cpu/", store), rank, size, std::move(gloo_options));
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      c10::make_intrusive<c10d::PrefixStore>("cuda/", store), rank, size, nccl_options);
  using Type = c10d::ProcessGroup::BackendType;
  group->setBackend(c10::DeviceType::CPU, Type::GLOO, gloo);
  group->setBackend(c10::DeviceType::CUDA, Type::NCCL, nccl);
  // As Python's init_process_group() without a backend on a CUDA machine.
  group->setDefaultBackend(Type::NCCL);
  // The communicator now (as Python with device_id): a rank that cannot join
  // fails here, in init(), not at its first collective.
  nccl->eagerConnectSingleDevice(device);
  return group;
}

#else

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_nccl_group(
    const c10::intrusive_ptr<c10d::Store>&, int, int,
    c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>, c10::Device, std::chrono::milliseconds) {
  throw std::logic_error("rankwise: make_gloo_nccl_group called in a build without NCCL");
}

#endif

}  // namespace rankwise::compat
