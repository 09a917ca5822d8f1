#include "dist/gloo_interfaces.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/text.h"
#include "util/interface_list.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::dist {

namespace {

// The local address this node uses to reach `host` (the routing table's
// choice; a UDP connect sends no packet), or "" when it cannot be found.
std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "";
  std::string result;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {};
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr) {
      result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return result;
}

}  // namespace

std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices(const LaunchEnv& env) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  if (auto names = get_env("GLOO_SOCKET_IFNAME"); names && !names->empty()) {
    for (const std::string& name : util::split_list(*names)) {
      if (!util::is_network_interface(name)) {
        core::raise<ConfigError>(
            core::At{env.rank, env.world_size},
            "GLOO_SOCKET_IFNAME='{}': '{}' is not a network interface of this host; see `ip -brief "
            "link` (rankwise-run --iface sets this variable)",
            *names, name);
      }
      devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
    return devices;
  }
  std::string address = local_address_towards(env.master_addr);
  if (address.empty()) address = env.master_addr == "localhost" ? "127.0.0.1" : env.master_addr;
  devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  return devices;
}

}  // namespace rankwise::dist
