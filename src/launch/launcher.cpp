// rankwise-run's top level: parse, set up the store and the environment, run
// attempts (restarting up to --max-restarts), print the summary, exit.
#include "launch/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>

#include "util/host_name.h"
#include "wire/collective_progress.h"
#include "wire/worker_env.h"
#include "launch/output/console_streams.h"
#include "launch/attempt_loop.h"
#include "launch/elastic_agent.h"
#include "launch/rendezvous/exit_barrier.h"
#include "launch/rendezvous/free_port.h"
#include "launch/rendezvous/launcher_heartbeat.h"
#include "launch/cli/parse.h"
#include "launch/output/quiet_c10_logging.h"
#include "launch/rendezvous/node_rendezvous.h"
#include "launch/output/say.h"
#include "launch/workers/visible_devices.h"
#include "launch/workers/signals.h"
#include "launch/workers/summary.h"
#include "launch/workers/worker_group.h"

extern char** environ;

namespace rankwise::launch {

namespace {

// Variables the launcher sets for every worker (see worker_environment).
const std::set<std::string> kWorkerVariables(wire::kWorkerVariables.begin(), wire::kWorkerVariables.end());

std::vector<std::string> base_environment() {
  std::vector<std::string> env;
  bool has_omp = false;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    const std::string name(*e, static_cast<std::size_t>(eq - *e));
    if (name == "OMP_NUM_THREADS") has_omp = true;
    if (kWorkerVariables.count(name) == 0) env.emplace_back(*e);
  }
  if (!has_omp) {
    env.emplace_back("OMP_NUM_THREADS=1");
    output::say("OMP_NUM_THREADS is not set; setting it to 1 for every worker so they do not overload "
        "the node (set it yourself to tune)");
  }
  return env;
}

// More workers than the cores this launcher may run on: on the CPU each
// worker computes, so they take turns and the job runs several times slower.
void warn_if_oversubscribed(int workers) {
  const int cores = workers::cpu_core_count();
  if (workers <= cores) return;
  output::say(fmt::format(
      "{} workers on this node and {} CPU core{} for them: workers training on the CPU take turns "
      "and run several times slower than {} would (--nproc-per-node {}, or more nodes); workers "
      "that train on their own GPUs are fine",
      workers, cores, cores == 1 ? "" : "s", cores, cores));
}

// Temporary directory holding the workers' error files; removed on exit. Its
// name carries the launcher's pid, so that directories left by a launcher that
// was killed with SIGKILL (which cannot clean up) are removed by the next one.
class ErrorDir {
 public:
  ErrorDir() {
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = tmp && *tmp ? tmp : "/tmp";
    remove_stale(dir);
    std::string templ = fmt::format("{}/{}{}-XXXXXX", dir, kPrefix, ::getpid());
    if (::mkdtemp(templ.data()) == nullptr) {
      throw UsageError(fmt::format("cannot create a temporary directory from '{}': {}; set TMPDIR "
                                   "to a writable directory", templ, std::strerror(errno)));
    }
    path_ = templ;
  }
  ~ErrorDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  static constexpr const char* kPrefix = "rankwise-run-";

  // Removes <dir>/rankwise-run-<pid>-* whose launcher <pid> no longer exists.
  static void remove_stale(const std::string& dir) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(kPrefix, 0) != 0) continue;
      const std::string rest = name.substr(std::strlen(kPrefix));
      const auto dash = rest.find('-');
      if (dash == std::string::npos || dash == 0 ||
          rest.find_first_not_of("0123456789") != dash) {
        continue;
      }
      const auto pid = static_cast<pid_t>(std::stol(rest.substr(0, dash)));
      if (::kill(pid, 0) != 0 && errno == ESRCH) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
  }

  std::string path_;
};

// The secret prefix of the workers' store keys. Anyone who can reach the
// store can read and write it (c10d's TCPStore has no authentication, as with
// torchrun), but keys under a prefix it cannot guess are out of reach of
// writes, so a stray or hostile client cannot feed the workers addresses or
// spoil a restart. One node: 128 random bits, handed only to this launcher's
// workers. Several nodes: every launcher must use the same, so it is
// RANKWISE_JOB_KEY from the environment when the user sets it on every node
// (documented), else none.
std::string job_key(const LaunchOptions& o) {
  const char* given = std::getenv("RANKWISE_JOB_KEY");
  if (given && *given) {
    const std::string key = given;
    // Keys of c10d's 2.x store are at most 8192 bytes; a key is a path part.
    if (key.size() > 256 || key.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                  "0123456789-_.") != std::string::npos) {
      throw UsageError(fmt::format(
          "RANKWISE_JOB_KEY: {} characters, or characters other than letters, digits, '-', '_' "
          "and '.'; use at most 256 of those, e.g. RANKWISE_JOB_KEY=$(openssl rand -hex 16)",
          key.size()));
    }
    return key;
  }
  if (o.nnodes > 1) return "";
  unsigned char bytes[16];
  std::ifstream random("/dev/urandom", std::ios::binary);
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    throw std::runtime_error("cannot read /dev/urandom for the job key");
  }
  std::string key;
  for (unsigned char b : bytes) key += fmt::format("{:02x}", b);
  return key;
}

// A job of a fixed node count: every attempt has the same nodes. On several
// nodes a failure anywhere ends the attempt on every node
// (group_failure.h), and each restart starts with a rendezvous round of every
// node (a node that does not come back is named). When this node leaves the
// job, it says why in the store, so that nodes waiting for a restart stop.
class FixedMembership : public AttemptMembership {
 public:
  FixedMembership(const LaunchOptions& o, workers::AttemptConfig& config,
                  rendezvous::NodeRendezvous& rdzv)
      : o_(o), config_(config), rdzv_(rdzv) {}

  workers::AttemptConfig* meet(std::optional<int>& exit_code) override {
    const int attempt = next_attempt_++;
    if (const int sig = workers::drain_stop_signal()) {
      output::say(fmt::format("received {} between attempts; exiting", workers::signal_name(sig)));
      exit_code = leave(128 + sig, fmt::format("it received {}", workers::signal_name(sig)));
      return nullptr;
    }
    if (attempt > 0 && o_.nnodes > 1) {
      int pending = 0;
      const bool joined = rdzv_.join(o_.node_rank, o_.nnodes, config_.host, o_.rendezvous_timeout,
                                     [&] { return (pending = workers::drain_stop_signal()) != 0; }, attempt);
      if (!joined) {
        output::say(fmt::format("received {} during the rendezvous for restart {}; exiting",
                                workers::signal_name(pending), attempt));
        exit_code = leave(128 + pending, fmt::format("it received {}", workers::signal_name(pending)));
        return nullptr;
      }
    }
    config_.attempt = last_attempt_ = attempt;
    return &config_;
  }

  std::string attempt_name() const override { return fmt::format("attempt {}", config_.attempt); }
  std::string restart_how() const override { return o_.nnodes > 1 ? " with every node" : ""; }

  bool failed(const workers::FailureReport& failure) override {
    if (const auto& remote = failure.remote; remote && remote->silent) {
      config_.gone_nodes.push_back(remote->node_rank);
    }
    return false;
  }

  int succeeded() override { return leave(kExitOk, "its workers succeeded"); }
  int signaled(const workers::AttemptResult& result) override {
    return leave(workers::signaled_exit_code(result),
                 fmt::format("it received {}", workers::signal_name(result.signal)));
  }
  int gave_up(const workers::FailureReport&) override {
    return leave(kExitWorkerFailed, fmt::format("it gave up ({} restarts allowed)", o_.max_restarts));
  }

 private:
  int leave(int code, const std::string& why) {
    if (o_.nnodes > 1) rdzv_.close(o_.node_rank, config_.host, why, code == kExitOk, last_attempt_);
    return code;
  }

  const LaunchOptions& o_;
  workers::AttemptConfig& config_;
  rendezvous::NodeRendezvous& rdzv_;
  int next_attempt_ = 0;
  int last_attempt_ = -1;  // the last attempt this node ran
};

// --redirects/--tee without --log-dir: as torchrun, a new temporary
// directory (kept after the run: it holds the only copy of what was
// redirected), named on stderr.
std::string temporary_log_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = fmt::format("{}/rankwise-logs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (::mkdtemp(templ.data()) == nullptr) {
    throw UsageError(fmt::format("--redirects/--tee: cannot create a log directory from '{}': "
                                 "{}; give --log-dir DIR, or set TMPDIR to a writable directory",
                                 templ, std::strerror(errno)));
  }
  output::say(fmt::format("--redirects/--tee without --log-dir: every rank's output goes to {} (give "
                  "--log-dir to choose)",
                  templ));
  return templ;
}

// --log-dir, or the temporary one --redirects/--tee need: created now.
void prepare_log_dir(LaunchOptions& o) {
  if (o.log_dir.empty() && output::redirects_to_files(o)) o.log_dir = temporary_log_dir();
  if (o.log_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(o.log_dir, ec);
  if (ec) {
    throw UsageError(fmt::format("--log-dir '{}': cannot create it: {}", o.log_dir, ec.message()));
  }
}

// --master-port given: hosts the store there or reaches it (see open_store).
bool open_store_at_port(const LaunchOptions& o, const std::string& key,
                        std::chrono::milliseconds store_timeout,
                        std::unique_ptr<rendezvous::NodeRendezvous>& rdzv) {
  // Who hosts: --rdzv-conf is_host when given, else node 0; with node ranks
  // assigned by the rendezvous, as torchrun's c10d backend, a node whose
  // address the store's is, unless another launcher on this machine already
  // listens there (or binds first: then this one joins as a client). Looking
  // first matters: c10d's own bind may take another address family's socket.
  bool host_store = o.is_host.value_or(o.node_rank == 0);
  const bool may_fall_back = o.assign_node_rank && !o.is_host;
  if (may_fall_back) host_store = rendezvous::can_listen_on(o.master_addr, *o.master_port);
  try {
    rendezvous::check_resolves(o.master_addr);  // at once, not after the whole timeout
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  try {
    rdzv = std::make_unique<rendezvous::NodeRendezvous>(o.master_addr, *o.master_port, host_store,
                                                        store_timeout, key,
                                                        o.launcher_silence_limit);
  } catch (const RendezvousError& e) {
    if (!host_store) throw;
    if (!may_fall_back) throw UsageError(e.what());  // port in use: configuration
    host_store = false;
    rdzv = std::make_unique<rendezvous::NodeRendezvous>(o.master_addr, *o.master_port, false,
                                                        store_timeout, key,
                                                        o.launcher_silence_limit);
  }
  return host_store;
}

// No --master-port (one node): hosts the store on a free port.
void host_store_on_free_port(const LaunchOptions& o, const std::string& key,
                             std::chrono::milliseconds store_timeout,
                             std::unique_ptr<rendezvous::NodeRendezvous>& rdzv) {
  for (int tries = 0; !rdzv; ++tries) {
    int port = 0;
    try {
      port = rendezvous::find_free_port(o.master_addr);
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());  // --master-addr names no address of this node
    }
    try {
      rdzv = std::make_unique<rendezvous::NodeRendezvous>(o.master_addr, port, true, store_timeout,
                                                          key, o.launcher_silence_limit);
    } catch (const RendezvousError&) {
      if (tries >= 4) throw;  // someone took the port between the probe and the bind
    }
  }
}

// Hosts the rendezvous store or connects to it, into `rdzv`; returns whether
// this launcher hosts it.
bool open_store(const LaunchOptions& o, const std::string& key,
                std::chrono::milliseconds store_timeout,
                std::unique_ptr<rendezvous::NodeRendezvous>& rdzv) {
  if (o.master_port) return open_store_at_port(o, key, store_timeout, rdzv);
  host_store_on_free_port(o, key, store_timeout, rdzv);
  return true;
}

// Several nodes: node 0 says which job it is; every other node checks
// that before it writes any key, so that a node of another job (or with
// another job key) is refused without touching this one. Returns false when
// `stop_requested` returned true.
bool agree_on_job(const LaunchOptions& o, const std::string& key, bool host_store,
                  std::chrono::milliseconds store_timeout, rendezvous::NodeRendezvous& rdzv,
                  const std::function<bool()>& stop_requested) {
  const rendezvous::JobIdentity identity{o.run_id, rendezvous::job_key_fingerprint(key), o.nnodes,
                                         o.min_nnodes, o.nproc_per_node};
  if (host_store) {
    rdzv.publish_identity(identity, store_timeout);
    return true;
  }
  try {
    return rdzv.check_identity(identity, o.rendezvous_timeout, stop_requested);
  } catch (const rendezvous::JobMismatchError& e) {
    throw UsageError(e.what());
  }
}

// Every node registers and waits for the others. Returns false when
// `stop_requested` returned true.
bool join_nodes(const LaunchOptions& o, const std::string& host, rendezvous::NodeRendezvous& rdzv,
                const std::function<bool()>& stop_requested) {
  try {
    return rdzv.join(o.node_rank, o.nnodes, host, o.rendezvous_timeout, stop_requested);
  } catch (const rendezvous::JobMismatchError& e) {
    throw UsageError(e.what());  // e.g. a --node-rank given to two nodes
  }
}

// The attempts, then, on several nodes, the exit barrier: the exit code.
int run_job(const LaunchOptions& o, bool host_store, workers::AttemptConfig& config,
            rendezvous::NodeRendezvous& rdzv) {
  int code = kExitWorkerFailed;
  try {
    FixedMembership membership(o, config, rdzv);
    code = run_attempt_loop(membership, o.max_restarts);
  } catch (const RendezvousError& e) {  // a restart's rendezvous
    if (o.nnodes == 1) throw;
    output::say(fmt::format("error: {}", e.what()));
    rdzv.close(o.node_rank, config.host,
               fmt::format("its rendezvous for restart {} failed", config.attempt + 1), false,
               config.attempt);
  }
  if (o.nnodes > 1) code = rendezvous::exit_barrier(o, host_store, code, config, rdzv);
  return code;
}

int run(LaunchOptions o) {
  workers::install_signal_pipe();
  const std::string host = util::host_name();
  prepare_log_dir(o);
  ErrorDir error_dir;
  std::vector<std::string> base_env = base_environment();
  warn_if_oversubscribed(o.nproc_per_node);

  // Rendezvous store: hosted by node 0 before any worker starts.
  const std::string key = job_key(o);
  const std::chrono::milliseconds store_timeout = o.store_timeout.value_or(o.rendezvous_timeout);
  std::unique_ptr<rendezvous::NodeRendezvous> rdzv;
  // The store is left to the process's exit, never destroyed, on every path
  // out of here: c10d's server joins its thread, which a client that sent half
  // a message keeps in a blocking read with libtorch 1.13 (the launcher would
  // outlive its job until that client closed). Exiting closes every socket
  // just the same.
  struct LeftToExit {
    std::unique_ptr<rendezvous::NodeRendezvous>& rdzv;
    ~LeftToExit() { static_cast<void>(rdzv.release()); }
  } left_to_exit{rdzv};
  const bool host_store = open_store(o, key, store_timeout, rdzv);
  int pending_signal = 0;
  const auto stop_requested = [&] { return (pending_signal = workers::drain_stop_signal()) != 0; };
  const auto signaled = [&] {
    output::say(fmt::format("received {} during the rendezvous; exiting",
                            workers::signal_name(pending_signal)));
    return 128 + pending_signal;
  };
  if (o.nnodes > 1) {
    if (!agree_on_job(o, key, host_store, store_timeout, *rdzv, stop_requested)) return signaled();
    if (o.elastic()) {
      ElasticSetup setup{host, error_dir.path(), std::move(base_env), key, host_store,
                         store_timeout};
      return run_elastic(o, std::move(setup), *rdzv);
    }
    if (o.assign_node_rank) {
      o.node_rank = host_store ? 0 : rdzv->take_node_rank(o.nnodes, store_timeout);
    }
  }
  if (!join_nodes(o, host, *rdzv, stop_requested)) return signaled();
  // From here to the exit, the other nodes can tell this launcher is alive.
  std::optional<rendezvous::LauncherHeartbeat> heartbeat;
  if (o.nnodes > 1) heartbeat.emplace(o.master_addr, rdzv->port(), key, o.node_rank);

  workers::AttemptConfig config =
      workers::attempt_config(o, rdzv->port(), host, error_dir.path(), std::move(base_env), key);
  return run_job(o, host_store, config, *rdzv);
}

}  // namespace

int main(int argc, char** argv) {
  output::silence_libtorch_logging();
  try {
    const std::optional<LaunchOptions> options = cli::parse_command_line(argc, argv);
    if (!options) return kExitOk;
    for (const std::string& notice : options->notices) output::say(notice);
    return run(*options);
  } catch (const UsageError& e) {
    output::say(fmt::format("error: {}", e.what()));
    return kExitUsage;
  } catch (const RendezvousError& e) {
    output::say(fmt::format("error: {}", e.what()));
    return kExitWorkerFailed;
  } catch (const std::exception& e) {
    output::say(fmt::format("error: {}", e.what()));
    return kExitWorkerFailed;
  }
}

}  // namespace rankwise::launch
