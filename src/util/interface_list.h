#pragma once
// Network interface lists as GLOO_SOCKET_IFNAME (PyTorch) and rankwise-run
// --iface spell them: names separated by commas, e.g. "eth0,eth1". Read by
// the workers' Gloo device discovery (gloo_devices.cpp) and checked by the
// launcher's command line (launch/cli/parse.cpp); header only, since the launcher
// does not link the rankwise library.
#include <net/if.h>

#include <string>
#include <vector>

namespace rankwise::util {

/// The entries of a comma-separated list, in order; empty entries are kept
/// ("a,,b" has three, "" has one), so the caller rejects them by name.
inline std::vector<std::string> split_interface_list(const std::string& list) {
  std::vector<std::string> names;
  for (std::size_t start = 0, comma = 0; comma != std::string::npos; start = comma + 1) {
    comma = list.find(',', start);
    const std::size_t length = comma == std::string::npos ? std::string::npos : comma - start;
    names.push_back(list.substr(start, length));
  }
  return names;
}

/// True when `name` is a network interface of this host (if_nametoindex
/// knows it; `ip -brief link` lists them).
inline bool is_network_interface(const std::string& name) {
  return !name.empty() && ::if_nametoindex(name.c_str()) != 0;
}

}  // namespace rankwise::util
