#pragma once
// A c10d::ProcessGroup over Gloo, built the way this libtorch wants it:
//   1.13: c10d::ProcessGroupGloo is itself a c10d::ProcessGroup.
//   2.x:  it is a c10d::Backend; a c10d::ProcessGroup holds one backend per
//         device type (setBackend) and a default one. As Python's
//         init_process_group("gloo") does, Gloo serves both CPU and CUDA
//         tensors and is the default.
// The case is chosen from the class hierarchy at compile time.
// Used only by src/dist/process_group.cpp.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <type_traits>

namespace rankwise::compat {

/// Whether c10d::ProcessGroupGloo is a c10d::ProcessGroup (libtorch 1.x).
inline constexpr bool kGlooIsProcessGroup =
    std::is_base_of_v<c10d::ProcessGroup, c10d::ProcessGroupGloo>;

/// A process group of `size` ranks over Gloo, rendezvousing through `store`.
/// (A template only so that the case not taken is never compiled.)
template <class Group = c10d::ProcessGroup, class Gloo = c10d::ProcessGroupGloo>
c10::intrusive_ptr<Group> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                          int size, c10::intrusive_ptr<typename Gloo::Options> options) {
  auto gloo = c10::make_intrusive<Gloo>(store, rank, size, std::move(options));
  if constexpr (std::is_base_of_v<Group, Gloo>) {
    return gloo;
  } else {
    auto group = c10::make_intrusive<Group>(store, rank, size);
    const auto type = Group::BackendType::GLOO;
    group->setBackend(c10::DeviceType::CPU, type, gloo);
    group->setBackend(c10::DeviceType::CUDA, type, gloo);
    group->setDefaultBackend(type);
    return group;
  }
}

}  // namespace rankwise::compat
