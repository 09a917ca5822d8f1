#pragma once
// A client of the rendezvous store a launcher hosts on 127.0.0.1, for tests
// that wait on (or check) what a launcher registered there.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>

namespace rankwise::test {

/// A client of the store on 127.0.0.1:`port`; retries until it is up (10 s).
inline c10d::TCPStore store_client(int port) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(10);
  return c10d::TCPStore("127.0.0.1", options);
}

}  // namespace rankwise::test
