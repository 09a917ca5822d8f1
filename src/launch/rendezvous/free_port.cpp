#include "launch/rendezvous/free_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace rankwise::launch::rendezvous {

namespace {

// A socket bound to the first address of `addr` that binds at `port`; its
// port is written to `bound_port`. Throws std::runtime_error.
int bind_socket(const std::string& addr, int port, int& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    throw std::runtime_error(fmt::format("cannot resolve master address '{}': {}; check "
                                         "--master-addr", addr, ::gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    if (port != 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      bound_port = ss.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      ::freeaddrinfo(res);
      return fd;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  throw std::runtime_error(last_error);
}

}  // namespace

int find_free_port(const std::string& addr) {
  int port = 0;
  int fd = -1;
  try {
    fd = bind_socket(addr, 0, port);
  } catch (const std::runtime_error& e) {
    if (std::strncmp(e.what(), "cannot resolve", 14) == 0) throw;
    throw std::runtime_error(fmt::format("cannot bind a free port on master address '{}': {}; "
                                         "check --master-addr (it must be this node's address)",
                                         addr, e.what()));
  }
  ::close(fd);
  return port;
}

bool can_listen_on(const std::string& addr, int port) {
  try {
    ::close(listening_socket(addr, port));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

int listening_socket(const std::string& addr, int port) {
  int bound = 0;
  const int fd = bind_socket(addr, port, bound);
  if (::listen(fd, SOMAXCONN) != 0) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error(error);
  }
  return fd;
}

std::string why_store_cannot_be_hosted(const std::string& addr, int port,
                                       const std::string& store_error) {
  std::string why;
  try {
    ::close(listening_socket(addr, port));
  } catch (const std::runtime_error& e) {
    why = e.what();
  }
  const std::string where = fmt::format("cannot host the rendezvous store at {}:{}", addr, port);
  if (why.rfind("cannot resolve", 0) == 0) return fmt::format("{}: {}", where, why);
  if (why.find("Cannot assign requested address") != std::string::npos) {
    return fmt::format(
        "{}: '{}' is not an address of this node ({}); the node that hosts the store (node 0) "
        "must give one of its own addresses or host names as --master-addr (see ip -brief addr)",
        where, addr, why);
  }
  if (why.find("Address already in use") != std::string::npos) {
    return fmt::format(
        "{}: the port is in use ({}); choose another --master-port, or stop what listens there "
        "(ss -ltnp 'sport = :{}')",
        where, why, port);
  }
  // The address binds here now: the store failed for another reason.
  return fmt::format("{}: {}{}", where, store_error, why.empty() ? "" : fmt::format("; {}", why));
}

void check_resolves(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    throw std::runtime_error(fmt::format("cannot resolve master address '{}': {}; check "
                                         "--master-addr", addr, ::gai_strerror(rc)));
  }
  ::freeaddrinfo(res);
}

}  // namespace rankwise::launch::rendezvous
