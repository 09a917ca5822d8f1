#pragma once
// Which backend runs c10d's barrier. 2.x's BarrierOptions has a `device`:
// without one, a group whose default backend is NCCL runs the barrier as an
// NCCL all_reduce that orders the CUDA stream but does not block the host.
// With the CPU named, the barrier runs on the group's Gloo backend and its
// wait() returns only once every rank has arrived. 1.13's BarrierOptions has
// no such field (its group is Gloo alone). Chosen by whether the member
// exists. Used only by src/dist/process_group.cpp.
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace rankwise::compat {

/// Makes `options` select the CPU (Gloo) backend where BarrierOptions can say so.
template <class Options = c10d::BarrierOptions>
void barrier_on_host(Options& options) {
  if constexpr (requires { options.device; }) options.device = c10::Device(c10::kCPU);
}

}  // namespace rankwise::compat
