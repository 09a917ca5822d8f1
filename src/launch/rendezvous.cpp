#include "launch/rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fmt/format.h>

#include <thread>
#include <vector>

#include "detail/join.h"
#include "detail/progress_record.h"
#include "launch/free_port.h"

namespace rankwise {
namespace launch {

std::string node_key(const std::string& job_key, int node_rank) {
  return fmt::format("{}nodes/{}", rankwise::detail::job_prefix(job_key), node_rank);
}

namespace {
// libtorch 2.x's store takes over a socket the launcher bound itself
// (masterListenFd); 1.13's has no such option and listens on every interface.
template <typename Options>
constexpr bool kStoreTakesASocket = requires(Options o) { o.masterListenFd = 0; };

// Where the store can take a socket: one bound to the master address only
// (loopback for a one-node job), not every interface. When it cannot be bound
// here (not an address of this node, the port in use), the store binds as
// c10d does and reports what is wrong.
template <typename Options>
void listen_on_master_address_only(Options& o, const std::string& addr, int port) {
  if constexpr (kStoreTakesASocket<Options>) {
    try {
      o.masterListenFd = listening_socket(addr, port);
    } catch (const std::runtime_error&) {
    }
  }
}
}  // namespace

bool store_listens_on_master_address_only() {
  return kStoreTakesASocket<c10d::TCPStoreOptions>;
}

NodeRendezvous::NodeRendezvous(const std::string& addr, int port, bool host_store,
                               std::chrono::milliseconds timeout, const std::string& job_key)
    : addr_(addr), port_(port), job_key_(job_key) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = host_store;
  o.waitWorkers = false;
  o.timeout = timeout;
  if (host_store) listen_on_master_address_only(o, addr, port);
  try {
    store_ = std::make_unique<c10d::TCPStore>(addr, o);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string first_line = what.substr(0, what.find('\n'));
    if (host_store) {
      throw RendezvousError(fmt::format(
          "cannot host the rendezvous store on port {}: {}; the port may be in use: choose "
          "another --master-port",
          port, first_line));
    }
    throw RendezvousError(fmt::format(
        "cannot reach node 0's rendezvous store at {}:{} within {} s: {}; start node 0 "
        "(--node-rank 0) and check --master-addr/--master-port",
        addr, port, timeout.count() / 1000.0, first_line));
  }
}

NodeRendezvous::~NodeRendezvous() = default;

bool NodeRendezvous::join(int node_rank, int nnodes, const std::string& host,
                          std::chrono::milliseconds timeout,
                          const std::function<bool()>& interrupted) {
  const std::string value = host;
  try {
    store_->set(node_key(job_key_, node_rank), std::vector<uint8_t>(value.begin(), value.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < nnodes; ++r) keys.push_back(node_key(job_key_, r));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (store_->check(keys)) return true;
      if (interrupted()) return false;
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::vector<int> missing;
    for (int r = 0; r < nnodes; ++r) {
      if (!store_->check({node_key(job_key_, r)})) missing.push_back(r);
    }
    throw RendezvousError(fmt::format(
        "rendezvous timed out after {} s at {}:{}: node rank(s) {} of {} never arrived; start "
        "rankwise-run on those nodes with the same --nnodes/--master-addr/--master-port, or "
        "raise --rendezvous-timeout",
        timeout.count() / 1000.0, addr_, port_, rankwise::detail::join_list(missing), nnodes));
  } catch (const RendezvousError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw RendezvousError(fmt::format("rendezvous store {}:{} failed: {}", addr_, port_,
                                      what.substr(0, what.find('\n'))));
  }
}

void NodeRendezvous::leave(int nnodes, std::chrono::milliseconds timeout,
                           const std::function<bool()>& interrupted) {
  try {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::string finished_key = rankwise::detail::job_prefix(job_key_) + "finished";
    std::int64_t done = store_->add(finished_key, 1);
    while (done < nnodes && std::chrono::steady_clock::now() < deadline && !interrupted()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      done = store_->add(finished_key, 0);
    }
  } catch (const std::exception&) {
    // Node 0 already closed the store: nothing left to wait for.
  }
}

}  // namespace launch
}  // namespace rankwise
