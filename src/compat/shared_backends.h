#pragma once
// A c10d::ProcessGroup subclass that forwards some collectives to another
// group must still serve the ones it does not forward:
//   1.13: the subclass overrides each collective it serves (ProcessGroup's
//         own versions throw "does not support"); nothing to share.
//   2.x:  ProcessGroup's collectives dispatch to the group's backends (one
//         per device type); giving the subclass the other group's backends
//         (and its bound device, before setBackend hands it to them) makes
//         every collective it does not override run on the same Gloo or
//         NCCL communicators.
// Chosen by whether ProcessGroup has setBackend. Used only by
// src/parallel/ddp/recorded_group.cpp.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace rankwise::compat {

/// Gives `group` the backends of `from` where ProcessGroup has backends.
template <class Group = c10d::ProcessGroup>
void share_backends(Group& group, Group& from) {
  if constexpr (requires { group.hasBackendForDeviceType(c10::DeviceType::CPU); }) {
    group.setBoundDeviceId(from.getBoundDeviceId());
    for (const auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
      if (!from.hasBackendForDeviceType(device)) continue;
      auto backend = from.getBackend(device);
      group.setBackend(device, Group::strToBackendType(backend->getBackendName()), backend);
    }
    group.setDefaultBackend(from.getBackendType());
  }
}

}  // namespace rankwise::compat
