#pragma once
/// \file free_port.h
/// Binding TCP sockets on the master address: a free port for the rendezvous
/// store, and the store's own listening socket.

#include <string>

namespace rankwise::launch::rendezvous {

/// Binds port 0 on `addr` (an IPv4/IPv6 literal or a host name), reads the
/// port the kernel chose and releases it. Throws std::runtime_error naming the
/// address when it cannot be resolved or bound.
int find_free_port(const std::string& addr);

/// True when a socket can listen on `addr`:`port` now: `addr` (a literal or
/// a host name) is an address of this node (a loopback address, or one of
/// its interfaces') and nothing listens on that port there. Never throws.
bool can_listen_on(const std::string& addr, int port);

/// A socket bound to `addr`:`port` (the first address `addr` resolves to that
/// can be bound) and listening, close-on-exec; for the store to take over
/// (c10d::TCPStoreOptions::masterListenFd), so that it listens on that
/// address only, not on every interface. Throws std::runtime_error with the
/// reason (errno text: "Address already in use", "Cannot assign requested
/// address" when `addr` is not this node's) when it cannot.
int listening_socket(const std::string& addr, int port);

/// Why the rendezvous store cannot be hosted at `addr`:`port`, for the user:
/// `addr` does not resolve, is not an address of this node, or the port is in
/// use, each with what to do; else `store_error` (c10d's message). Probes by
/// binding the address once more (never throws).
std::string why_store_cannot_be_hosted(const std::string& addr, int port,
                                       const std::string& store_error);

/// Throws std::runtime_error ("cannot resolve master address 'X': ...;
/// check --master-addr") when `addr` does not resolve; else does nothing.
void check_resolves(const std::string& addr);

}  // namespace rankwise::launch::rendezvous
