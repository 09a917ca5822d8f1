#pragma once
/// \file free_port.h
/// Choosing a free TCP port for the rendezvous store.

#include <string>

namespace rankwise {
namespace launch {

/// Binds port 0 on `addr` (an IPv4/IPv6 literal or a host name), reads the
/// port the kernel chose and releases it. Throws std::runtime_error naming the
/// address when it cannot be resolved or bound.
int find_free_port(const std::string& addr);

}  // namespace launch
}  // namespace rankwise
