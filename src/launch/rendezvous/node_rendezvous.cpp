#include "launch/rendezvous/node_rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "util/text.h"
#include "wire/collective_progress.h"
#include "launch/rendezvous/free_port.h"
#include "launch/rendezvous/group_failure.h"
#include "launch/rendezvous/launcher_heartbeat.h"
#include "launch/rendezvous/off_thread.h"
#include "launch/rendezvous/store_poller.h"

namespace rankwise::launch::rendezvous {

std::string node_key(const std::string& job_key, int node_rank, int round) {
  if (round == 0) return fmt::format("{}nodes/{}", rankwise::wire::job_prefix(job_key), node_rank);
  return fmt::format("{}round_{}/nodes/{}", rankwise::wire::job_prefix(job_key), round, node_rank);
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
                               std::chrono::milliseconds timeout, const std::string& job_key,
                               std::chrono::milliseconds silence_limit)
    : addr_(addr), port_(port), job_key_(job_key), silence_limit_(silence_limit),
      host_store_(host_store) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = host_store;
  o.waitWorkers = false;
  o.timeout = timeout;
  if (host_store) {
    // Say at once when the address is not this node's or the port is taken:
    // c10d would report it late (1.13's own client waits its whole timeout
    // to connect to an address that is not here) or as something else.
    if (!can_listen_on(addr, port)) {
      throw RendezvousError(why_store_cannot_be_hosted(addr, port, "cannot listen there"));
    }
    listen_on_master_address_only(o, addr, port);
  }
  try {
    store_ = std::make_unique<c10d::TCPStore>(addr, o);
  } catch (const std::exception& e) {
    std::string why = util::first_line(e);
    while (!why.empty() && (why.back() == '.' || why.back() == ' ')) {
      why.pop_back();  // the message goes on after it
    }
    if (host_store) throw RendezvousError(why_store_cannot_be_hosted(addr, port, why));
    throw RendezvousError(fmt::format(
        "cannot reach node 0's rendezvous store at {}:{} within {} s: {}; start node 0 "
        "(--node-rank 0) and check --master-addr/--master-port",
        addr, port, timeout.count() / 1000.0, why));
  }
}

NodeRendezvous::~NodeRendezvous() = default;

namespace {
using SteadyClock = std::chrono::steady_clock;

// Nodes in [0, nnodes) not registered in `round` under `job_key` in `store`.
std::vector<int> missing_nodes(c10d::TCPStore& store, const std::string& job_key, int nnodes,
                               int round) {
  std::vector<int> missing;
  for (int r = 0; r < nnodes; ++r) {
    if (!store.check({node_key(job_key, r, round)})) missing.push_back(r);
  }
  return missing;
}

}  // namespace

std::string job_key_fingerprint(const std::string& job_key) {
  if (job_key.empty()) return "none";
  std::uint64_t h = 14695981039346656037ull;  // 64-bit FNV-1a: offset basis, then prime
  for (const unsigned char c : job_key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:08x}", static_cast<std::uint32_t>(h >> 32));
}

void NodeRendezvous::publish_identity(const JobIdentity& identity,
                                      std::chrono::milliseconds timeout) {
  const std::string text =
      nlohmann::json{{"id", identity.id},
                     {"key", identity.key_fingerprint},
                     {"nnodes", identity.nnodes},
                     {"min_nnodes", identity.min_nnodes},
                     {"nproc_per_node", identity.nproc_per_node}}
          .dump();
  Waited waited = Waited::kDone;
  try {
    waited = run_off_thread(
        [store = store_, text](const std::atomic<bool>&) {
          store->set(kJobIdentityKey, std::vector<uint8_t>(text.begin(), text.end()));
        },
        SteadyClock::now() + timeout, [] { return false; });
  } catch (const std::exception& e) {
    throw RendezvousError(fmt::format("publishing the job's id in the store {}:{} failed: {}",
                                      addr_, port_, util::first_line(e)));
  }
  if (waited != Waited::kDone) {
    throw RendezvousError(fmt::format(
        "publishing the job's id: the store {}:{} did not answer within {} s", addr_, port_,
        timeout.count() / 1000.0));
  }
}

bool NodeRendezvous::check_identity(const JobIdentity& mine, std::chrono::milliseconds timeout,
                                    const std::function<bool()>& interrupted) {
  const auto deadline = SteadyClock::now() + timeout;
  auto published = std::make_shared<std::optional<std::string>>();
  Waited waited = Waited::kDone;
  try {
    // Reads only: a node of another job must leave this job's keys alone.
    waited = run_off_thread(
        [store = store_, deadline, published](const std::atomic<bool>& cancel) {
          while (!cancel) {
            if ((*published = read_if_set(*store, kJobIdentityKey))) return;
            if (SteadyClock::now() >= deadline) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        },
        deadline + std::chrono::seconds(5), interrupted);
  } catch (const std::exception& e) {
    throw RendezvousError(fmt::format("rendezvous: the store {}:{} failed: {}", addr_, port_,
                                      util::first_line(e)));
  }
  if (waited == Waited::kInterrupted) return false;
  if (waited == Waited::kDeadline) {
    throw RendezvousError(fmt::format(
        "rendezvous: the store {}:{} stopped answering (node 0's launcher may be gone, or a "
        "client may hold the store)",
        addr_, port_));
  }
  if (!*published) {
    throw RendezvousError(fmt::format(
        "rendezvous timed out after {} s at {}:{}: node 0 never published its job id; start "
        "node 0's rankwise-run (the one that hosts the store), or raise --rendezvous-timeout",
        timeout.count() / 1000.0, addr_, port_));
  }
  const auto j = nlohmann::json::parse(**published, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string() || !j.contains("key") ||
      !j["key"].is_string()) {
    throw JobMismatchError(fmt::format(
        "the store at {}:{} holds no job id that this rankwise-run can read under '{}'; is it "
        "another program's store, or another version's?",
        addr_, port_, kJobIdentityKey));
  }
  const std::string id = j["id"], key = j["key"];
  if (id != mine.id) {
    throw JobMismatchError(fmt::format(
        "this node's --rdzv-id '{}' differs from node 0's '{}' at {}:{}: this node belongs to "
        "another job and is refused (job '{}' goes on); give every node of a job the same "
        "--rdzv-id, and run another job on its own --rdzv-endpoint or --master-port",
        mine.id, id, addr_, port_, id));
  }
  if (key != mine.key_fingerprint) {
    throw JobMismatchError(fmt::format(
        "RANKWISE_JOB_KEY differs from node 0's at {}:{} (key fingerprint {} on this node, {} on "
        "node 0; none: not set): this node is refused; set the same RANKWISE_JOB_KEY on every "
        "node of the job",
        addr_, port_, mine.key_fingerprint, key));
  }
  // A node that counted other nodes or processes per node would wait for a
  // node that never comes, or start workers with a world size that the
  // others do not share.
  const int nnodes = j.value("nnodes", mine.nnodes);
  const int min_nnodes = j.value("min_nnodes", nnodes);
  const int nproc = j.value("nproc_per_node", mine.nproc_per_node);
  const auto count = [](int min, int max) {
    return min == max ? fmt::format("{}", max) : fmt::format("{}:{}", min, max);
  };
  if (nnodes != mine.nnodes || min_nnodes != mine.min_nnodes || nproc != mine.nproc_per_node) {
    throw JobMismatchError(fmt::format(
        "this node's --nnodes {} --nproc-per-node {} differ from node 0's --nnodes {} "
        "--nproc-per-node {} at {}:{}: this node is refused (a job's world size is "
        "nnodes x nproc-per-node, the same on every node); give every node the same values",
        count(mine.min_nnodes, mine.nnodes), mine.nproc_per_node, count(min_nnodes, nnodes), nproc,
        addr_, port_));
  }
  return true;
}

int NodeRendezvous::take_node_rank(int nnodes, std::chrono::milliseconds timeout) {
  auto taken = std::make_shared<std::int64_t>(0);
  Waited waited = Waited::kDone;
  try {
    waited = run_off_thread(
        [store = store_, key = rankwise::wire::job_prefix(job_key_) + "node_ranks",
         taken](const std::atomic<bool>&) { *taken = store->add(key, 1); },
        SteadyClock::now() + timeout, [] { return false; });
  } catch (const std::exception& e) {
    throw RendezvousError(fmt::format("rendezvous: the store {}:{} failed: {}", addr_, port_,
                                      util::first_line(e)));
  }
  if (waited != Waited::kDone) {
    throw RendezvousError(fmt::format("rendezvous: the store {}:{} did not answer within {} s",
                                      addr_, port_, timeout.count() / 1000.0));
  }
  if (*taken >= nnodes) {
    throw RendezvousError(fmt::format(
        "rendezvous at {}:{}: node ranks 1 to {} of --nnodes {} are taken already, so this "
        "launcher would be node {}; start exactly {} launchers with this --rdzv-id and "
        "--rdzv-endpoint (one per node)",
        addr_, port_, nnodes - 1, nnodes, *taken, nnodes));
  }
  return static_cast<int>(*taken);
}

namespace {

// What join() asks for, copied to its thread.
struct JoinRequest {
  std::string job_key;
  int node_rank = 0;
  int nnodes = 0;
  std::string host;
  int round = 0;
  SteadyClock::time_point deadline;
};

// What join()'s thread found (shared with it: it may outlive join()).
struct JoinFindings {
  std::vector<int> missing;  // at the timeout: the nodes that never came
  std::string closed;        // a node left the job: its reason
  std::string taken_by;      // another launcher claimed this node rank
};

// Each node rank is claimed once per round, by one launcher (host and
// pid): a second node given the same --node-rank is told. Returns false
// when another launcher holds it (`found.taken_by`).
bool claim_node_rank(c10d::TCPStore& store, const JoinRequest& req, JoinFindings& found) {
  const std::string me = fmt::format("{} (pid {})", req.host, ::getpid());
  const std::vector<uint8_t> claim(me.begin(), me.end());
  const std::vector<uint8_t> holder =
      store.compareSet(node_key(req.job_key, req.node_rank, req.round) + "/claim", {}, claim);
  if (holder != claim) {
    found.taken_by = std::string(holder.begin(), holder.end());
    return false;
  }
  return true;
}

// A node that left the job (close()), if one did.
std::optional<NodeFailure> node_that_left(c10d::TCPStore& store, const std::string& job_key) {
  std::optional<NodeFailure> left;
  if (auto text = read_if_set(store, closed_key(job_key))) {
    left = decode_failure(*text);
    if (!left) left = NodeFailure{-1, "a node left the job", ""};
  }
  return left;
}

// Registers this node and waits until every node has, one left the job
// (`found.closed`) or the deadline (`found.missing`).
void register_and_wait(c10d::TCPStore& store, const JoinRequest& req, JoinFindings& found,
                       const std::atomic<bool>& cancel) {
  store.set(node_key(req.job_key, req.node_rank, req.round),
            std::vector<uint8_t>(req.host.begin(), req.host.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < req.nnodes; ++r) keys.push_back(node_key(req.job_key, r, req.round));
  for (;;) {
    if (cancel) return;
    // A node that left the job (see close()) before it ran this
    // round's attempt will not come, or, when it registered before
    // it left, will not run. One that left after it ran the attempt
    // took part in this round.
    const std::optional<NodeFailure> left = node_that_left(store, req.job_key);
    const bool all = store.check(keys);
    if (left && !(all && left->attempt >= req.round)) {
      found.closed = left->root_cause;
      return;
    }
    if (all) return;
    if (SteadyClock::now() >= req.deadline) {
      found.missing = missing_nodes(store, req.job_key, req.nnodes, req.round);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

bool NodeRendezvous::join(int node_rank, int nnodes, const std::string& host,
                          std::chrono::milliseconds timeout,
                          const std::function<bool()>& interrupted, int round) {
  // One node has nobody to wait for. Touching the store would only expose the
  // launcher to another client's stall (above).
  if (nnodes == 1) return !interrupted();
  const JoinRequest req{job_key_, node_rank, nnodes, host, round, SteadyClock::now() + timeout};
  auto found = std::make_shared<JoinFindings>();
  const std::string what =
      round == 0 ? std::string("rendezvous") : fmt::format("rendezvous for restart {}", round);
  try {
    const Waited waited = run_off_thread(
        [store = store_, req, found](const std::atomic<bool>& cancel) {
          if (claim_node_rank(*store, req, *found)) register_and_wait(*store, req, *found, cancel);
        },
        // The thread decides the timeout and names the missing nodes; a
        // store that stops answering is given 5 s more.
        req.deadline + std::chrono::seconds(5), interrupted);
    if (waited == Waited::kInterrupted) return false;
    if (waited == Waited::kDeadline) {
      throw RendezvousError(fmt::format(
          "{}: the store {}:{} stopped answering (node 0's launcher may be gone, or a client "
          "may hold the store)",
          what, addr_, port_));
    }
  } catch (const RendezvousError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string message = e.what();
    throw RendezvousError(fmt::format("{}: the store {}:{} failed: {}", what, addr_, port_,
                                      message.substr(0, message.find('\n'))));
  }
  if (!found->taken_by.empty()) {
    throw JobMismatchError(fmt::format(
        "{}: node rank {} is already taken by the launcher on {}; give every node its own "
        "--node-rank in [0, {}) (or, with --rdzv-backend c10d, none: nodes are then numbered as "
        "they join)",
        what, node_rank, found->taken_by, nnodes));
  }
  if (!found->closed.empty()) {
    throw RendezvousError(fmt::format("{} cannot complete: {}", what, found->closed));
  }
  if (found->missing.empty()) return true;
  throw RendezvousError(fmt::format(
      "{} timed out after {} s at {}:{}: node rank(s) {} of {} never arrived; start "
      "rankwise-run on those nodes with the same --nnodes/--master-addr/--master-port, or "
      "raise --rendezvous-timeout",
      what, timeout.count() / 1000.0, addr_, port_, rankwise::util::join_strings(found->missing),
      nnodes));
}

void NodeRendezvous::close(int node_rank, const std::string& host, const std::string& why, bool succeeded,
                           int last_attempt) {
  NodeFailure left;
  left.node_rank = node_rank;
  left.root_cause = fmt::format("node {} (host {}) left the job: {}", node_rank, host, why);
  left.succeeded = succeeded;
  left.attempt = last_attempt;
  try {
    run_off_thread(
        [store = store_, key = closed_key(job_key_), left](const std::atomic<bool>&) {
          publish_first(*store, key, left);
        },
        SteadyClock::now() + std::chrono::seconds(2), [] { return false; });
  } catch (const std::exception&) {
    // Node 0 already closed the store: nobody is left to tell.
  }
}

}  // namespace rankwise::launch::rendezvous
