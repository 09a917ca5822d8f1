#pragma once
// Network interface lists as GLOO_SOCKET_IFNAME (PyTorch) and rankwise-run
// --iface spell them: names separated by commas, e.g. "eth0,eth1" (split
// them with util::split_list, util/text.h). Read by
// the workers' Gloo device discovery (gloo_devices.cpp) and checked by the
// launcher's command line (launch/cli/parse.cpp); header only, since the launcher
// does not link the rankwise library.
#include <net/if.h>

#include <string>

namespace rankwise::util {

/// True when `name` is a network interface of this host (if_nametoindex
/// knows it; `ip -brief link` lists them).
inline bool is_network_interface(const std::string& name) {
  return !name.empty() && ::if_nametoindex(name.c_str()) != 0;
}

}  // namespace rankwise::util
