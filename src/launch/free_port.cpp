#include "launch/free_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

namespace rankwise {
namespace launch {

int find_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (rc != 0) {
    throw std::runtime_error(fmt::format("cannot resolve master address '{}': {}; check "
                                         "--master-addr", addr, ::gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        const int port = ss.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
        ::close(fd);
        ::freeaddrinfo(res);
        return port;
      }
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  throw std::runtime_error(fmt::format("cannot bind a free port on master address '{}': {}; "
                                       "check --master-addr (it must be this node's address)",
                                       addr, last_error));
}

}  // namespace launch
}  // namespace rankwise
