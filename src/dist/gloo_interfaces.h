#pragma once
// Which network devices a rank's Gloo uses (ProcessGroupGloo::Options::devices).
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <memory>
#include <vector>

#include "rankwise/env.h"

namespace rankwise::dist {

/// Gloo's transport devices. With GLOO_SOCKET_IFNAME (comma-separated, as in
/// PyTorch; rankwise-run --iface sets it): one device per interface. Otherwise
/// the address this node routes to MASTER_ADDR from: MASTER_ADDR itself on
/// node 0, this node's own address on the others (binding to MASTER_ADDR there
/// would fail), 127.0.0.1 for a local job. Throws ConfigError (naming `env`'s
/// rank) for a GLOO_SOCKET_IFNAME entry that is not an interface of this host.
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices(const LaunchEnv& env);

}  // namespace rankwise::dist
