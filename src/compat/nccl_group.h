#pragma once
// A c10d::ProcessGroup with NCCL for CUDA tensors and Gloo for CPU tensors,
// as Python's init_process_group("cpu:gloo,cuda:nccl") assembles it (libtorch
// 2.x only: there a ProcessGroup holds one c10d::Backend per device type).
// Whether this build has NCCL is decided in nccl_group.cpp alone, from the
// libtorch found (cmake/torch_compat.cmake defines RANKWISE_TORCH_NCCL when it
// has CUDA) and its headers. Used only by src/dist/process_group.cpp.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>

namespace rankwise::compat {

/// The name ProcessGroup::backend() reports for the group below (Python's
/// spelling of the same group).
inline constexpr const char* kGlooNcclBackendName = "cpu:gloo,cuda:nccl";

/// True when this build of rankwise can create NCCL groups: the libtorch it
/// was built against has CUDA and c10d's ProcessGroupNCCL.
bool nccl_compiled();

/// The group of `size` ranks: Gloo (`gloo_options`) for CPU tensors, NCCL for
/// CUDA tensors, NCCL's communicator bound to `device` (a CUDA device, made
/// this thread's current device first) and created at once, its watchdog
/// timeout `timeout`. Each backend rendezvouses under its own prefix of
/// `store` ("cpu/", "cuda/"), as Python's. Collective: every rank. Throws
/// c10::Error (or std::logic_error when !nccl_compiled()).
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_nccl_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options, c10::Device device,
    std::chrono::milliseconds timeout);

}  // namespace rankwise::compat
