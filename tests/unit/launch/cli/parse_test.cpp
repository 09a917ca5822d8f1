// rankwise-run's command line (launch/cli/): every flag, torchrun's included,
// --nproc-per-node keywords, and the UsageError each bad value gets.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launch/cli/parse.h"
#include "launch/output/console_streams.h"
#include "launch/workers/cpu_sched.h"
#include "launch/workers/visible_devices.h"
#include "launch/cli/index_list.h"
#include "launch/output/line_assembler.h"
#include "launch/options.h"
#include "launch/cli/rdzv_flags.h"
#include "launch/workers/summary.h"
#include "launch/output/tag_template.h"
#include "launch/workers/worker_group.h"

namespace rankwise::launch {
using namespace rankwise::launch::cli;
using namespace rankwise::launch::output;
using namespace rankwise::launch::rendezvous;
using namespace rankwise::launch::workers;
using namespace rankwise::wire;

namespace {

TEST(LaunchNproc, ParsesNumbersAndKeywords) {
  EXPECT_EQ(cli::resolve_nproc_per_node("3"), 3);
  EXPECT_EQ(cli::resolve_nproc_per_node("cpu"), launch::workers::cpu_core_count());
  EXPECT_GE(cli::resolve_nproc_per_node("auto"), 1);
  EXPECT_THROW(cli::resolve_nproc_per_node("0"), UsageError);
  EXPECT_THROW(cli::resolve_nproc_per_node("-2"), UsageError);
  EXPECT_THROW(cli::resolve_nproc_per_node("two"), UsageError);
  EXPECT_THROW(cli::resolve_nproc_per_node("2x"), UsageError);
}

/// parse_command_line over `args` (program name prepended); the UsageError text.
std::string usage_error(std::vector<std::string> args) {
  args.insert(args.begin(), "rankwise-run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(LaunchCli, BadUsageNamesTheFlag) {
  char templ[] = "/tmp/rankwise-cli-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string dir = templ, data = dir + "/data.txt";
  { std::ofstream(data) << "x"; }
  const std::string sh = "/bin/sh";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "0", sh}, "--nproc-per-node 0: must be at least 1"},
      {{"--nproc_per_node", "two", sh}, "--nproc-per-node 'two'"},
      {{"--nproc-per-node", "2"}, "no PROGRAM given"},
      {{dir + "/missing"}, "program '" + dir + "/missing' not found"},
      {{"no-such-program-rankwise"}, "'no-such-program-rankwise' not found in PATH"},
      {{data}, "is not an executable file"},
      {{"--tag", "[{rnk}] ", sh}, "--tag '[{rnk}] ': unknown placeholder {rnk}"},
      {{"--nnodes", "2", sh}, "--nnodes 2 needs --master-port"},
      {{"--nnodes", "1:2", "--master-port", "29500", sh},
       "--nnodes 1:2: an elastic range needs --rdzv-backend c10d"},
      {{"--nnodes", "3:2", sh}, "--nnodes 3:2: MIN 3 is above MAX 2"},
      {{"--nnodes", "1:2", "--rdzv-backend", "c10d", sh}, "--nnodes 2 needs --master-port"},
      {{"--nnodes", "two", sh}, "--nnodes 'two': expected a number of nodes"},
      {{"--nnodes", "2:x", sh}, "--nnodes '2:x'"},
      {{"--nnodes", "0", sh}, "--nnodes 0: must be at least 1"},
      {{"--node-rank", "1", sh}, "--node-rank 1: must be in [0, 1)"},
      {{"--standalone", "--nnodes", "2", "--master-port", "29500", sh}, "--standalone"},
      {{"--master-port", "70000", sh}, "--master-port 70000"},
      {{"--only-ranks", "0,5", "--nproc-per-node", "2", sh}, "--only-ranks '0,5'"},
      {{"--only_ranks", "x", sh}, "--only-ranks 'x'"},
      // One parser for every integer, as torchrun's int(): no empty entry,
      // fraction, hex or negative index.
      {{"--only-ranks", "0,", sh}, "--only-ranks '0,': '' is not a rank in [0, 1) (world size 1)"},
      {{"--only-ranks", "-1", sh}, "--only-ranks '-1': '-1' is not a rank"},
      {{"--only-ranks", "1.5", sh}, "--only-ranks '1.5': '1.5' is not a rank"},
      {{"--local-ranks-filter", "0,,1", "--nproc-per-node", "2", sh},
       "--local-ranks-filter '0,,1': '' is not a local rank in [0, 2) (--nproc-per-node 2)"},
      {{"--nnodes", "0x2", sh}, "--nnodes '0x2': expected a number of nodes"},
      {{"--nnodes", "-2", sh}, "--nnodes -2: must be at least 1"},
      {{"--nproc-per-node", "2 2", sh}, "--nproc-per-node '2 2': expected a positive integer"},
      {{"--tee", "-1", sh}, "--tee '-1': '-1' is not 0, 1, 2 or 3"},
      {{"--max-restarts", "-1", sh}, "--max-restarts"},
      {{"--grace-period", "-1", sh}, "--grace-period"},
      {{"--monitor-interval", "0", sh}, "--monitor-interval"},
      {{"--rendezvous-timeout", "0", sh}, "--rendezvous-timeout"},
      {{"--bogus", sh}, "unknown option '--bogus'"},
      {{"--iface", "no-such-if0", sh}, "--iface 'no-such-if0': 'no-such-if0' is not a network"},
      {{"--iface", "lo,", sh}, "--iface 'lo,'"},
      {{"--cpu-sched", "fifo", sh}, "--cpu-sched 'fifo': use inherit, normal, batch or idle"},
      // torchrun's rendezvous flags.
      {{"--rdzv-backend", "etcd", sh}, "--rdzv-backend 'etcd': not supported"},
      {{"--rdzv_backend=etcd-v2", sh}, "give --rdzv-backend c10d (or static, the default)"},
      {{"--rdzv-endpoint", "10.0.0.1:29400", "--master-addr", "10.0.0.2", sh},
       "--rdzv-endpoint '10.0.0.1:29400' and --master-addr '10.0.0.2' name different hosts"},
      {{"--rdzv-endpoint", "127.0.0.1:29400", "--master-port", "29500", sh},
       "--rdzv-endpoint '127.0.0.1:29400' and --master-port 29500 name different ports"},
      {{"--nnodes", "2", "--rdzv-endpoint", "node0:0", sh},
       "--rdzv-endpoint 'node0:0': port 0 (a free port) works on one node only"},
      {{"--rdzv-endpoint", "fd00::1:29400", sh}, "an IPv6 address needs brackets"},
      {{"--rdzv-endpoint", "[fd00::1:29400", sh}, "'[' without ']'"},
      {{"--rdzv-endpoint", "node0:", sh}, "no port after ':'"},
      {{"--rdzv-endpoint", "node0:70000", sh}, "port '70000' is not a number in [0, 65535]"},
      {{"--rdzv-endpoint", "node 0", sh}, "the host must be a name"},
      {{"--nnodes", "2", sh}, "or --rdzv-endpoint HOST:PORT"},
      {{"--rdzv-conf", "join_timeout=5,heartbeat_timeout=3", sh},
       "--rdzv-conf heartbeat_timeout=3: unknown key heartbeat_timeout; "
       "rankwise-run supports join_timeout, read_timeout, last_call_timeout, keep_alive_interval, "
       "keep_alive_max_attempt, is_host"},
      {{"--rdzv-conf", "keep_alive_max_attempt=2.5", sh},
       "--rdzv-conf keep_alive_max_attempt=2.5: not a whole number from 1 to 1000000"},
      {{"--rdzv-conf", "keep_alive_max_attempt=0", sh}, "keep_alive_max_attempt=0: not a whole"},
      {{"--rdzv-conf", "keep_alive_interval=0", sh},
       "--rdzv-conf keep_alive_interval=0: not a number of seconds above 0"},
      {{"--rdzv-conf", "keep_alive_interval=1,keep_alive_max_attempt=2", sh},
       "--rdzv-conf keep_alive_interval=1 x keep_alive_max_attempt=2 = 2 s: a launcher silent "
       "that long would be named lost while alive (launchers beat every 1 s); give at least 3 s"},
      {{"--rdzv-conf", "join_timeout", sh}, "--rdzv-conf join_timeout=: join_timeout has no value"},
      {{"--rdzv-conf", "=5", sh}, "--rdzv-conf =5: not key=value"},
      {{"--rdzv-conf", "timeout=5,join_timeout=6", sh},
       "--rdzv-conf join_timeout=6: join_timeout is given twice"},
      {{"--rdzv-conf", "read_timeout=soon", sh},
       "--rdzv-conf read_timeout=soon: not a number of seconds above 0"},
      {{"--rdzv-conf", "last_call_timeout=-1", sh},
       "--rdzv-conf last_call_timeout=-1: not a number of seconds above 0"},
      {{"--rdzv-conf", "is_host=maybe", sh}, "--rdzv-conf is_host=maybe: not a boolean"},
      {{"--rdzv-conf", "join_timeout=5", "--rendezvous-timeout", "6", sh},
       "--rdzv-conf join_timeout=5 and --rendezvous-timeout 6 disagree"},
      {{"--nnodes", "2", "--node-rank", "1", "--master-port", "29500", "--rdzv-conf", "is_host=1",
        sh},
       "--rdzv-conf is_host=1 contradicts --node-rank 1"},
      {{"--rdzv-conf", "is_host=0", sh}, "--rdzv-conf is_host=0 contradicts --node-rank 0"},
      // torchrun's logging flags.
      {{"--redirects", "4", sh}, "--redirects '4': '4' is not 0, 1, 2 or 3"},
      {{"-t", "0:1,5:2", "--nproc-per-node", "2", sh},
       "--tee '0:1,5:2': '5' is not a local rank in [0, 2)"},
      {{"--tee", "0:1,0:2", "--nproc-per-node", "2", sh}, "local rank 0 is given twice"},
      {{"--redirects", "0:1,", "--nproc-per-node", "2", sh}, "'' is not LOCAL_RANK:N"},
      {{"--redirects", "x", sh}, "give 0 (none), 1 (stdout), 2 (stderr) or 3 (both)"},
      {{"--local-ranks-filter", "0,2", "--nproc-per-node", "2", sh},
       "--local-ranks-filter '0,2': '2' is not a local rank in [0, 2)"},
      {{"--local_ranks_filter", "a", sh}, "--local-ranks-filter 'a'"},
      {{"--tag", "x", "--log-line-prefix-template", "y", sh},
       "--log-line-prefix-template and --tag both set the line prefix"},
      // torchrun's flags refused, each with what to use instead.
      {{"-m", "my.module"}, "-m/--module: not supported: rankwise-run runs programs, not Python "
                            "modules; run the module through Python: rankwise-run [options] "
                            "python -m MODULE"},
      {{"--module", sh}, "-m/--module: not supported"},
      {{"--run-path", sh}, "--run-path: not supported"},
      {{"--local_addr", "10.0.0.1", sh}, "--local-addr: not supported"},
      {{"--logs-specs", "mine", sh}, "--logs-specs: not supported"},
      {{"--duplicate-stdout-filters", "a,b", sh}, "--duplicate-stdout-filters: not supported"},
      {{"--duplicate_stderr_filters", "a", sh}, "--duplicate-stderr-filters: not supported"},
      {{"--numa-binding", "node", sh}, "--numa-binding: not supported"},
      {{"--print-completion", "bash", sh}, "--print-completion: not supported"},
      {{"--event-log-handler", "console", sh}, "--event-log-handler 'console': not supported"},
      {{"--signals-to-handle", "SIGTERM,SIGUSR1", sh},
       "--signals-to-handle 'SIGTERM,SIGUSR1': SIGUSR1 is not supported"},
      {{"--start-method", "thread", sh}, "--start-method"},
  };
  for (const auto& [args, expected] : cases) {
    const std::string msg = usage_error(args);
    EXPECT_NE(msg.find(expected), std::string::npos) << "expected '" << expected << "' in: " << msg;
  }
  std::filesystem::remove_all(dir);
}

TEST(LaunchCli, OptionsEndAtTheProgram) {
  std::vector<std::string> args = {"rankwise-run", "--nproc_per_node", "3", "--no-tag",
                                   "--grace-period", "0.5", "sh", "-c", "--nnodes", "-h"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto o = cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->nproc_per_node, 3);
  EXPECT_FALSE(o->tag_enabled);
  EXPECT_EQ(o->grace_period, std::chrono::milliseconds(500));
  EXPECT_EQ(o->program_argv, (std::vector<std::string>{"sh", "-c", "--nnodes", "-h"}));
  EXPECT_EQ(o->program.substr(o->program.size() - 3), "/sh");
  EXPECT_FALSE(o->master_port.has_value());
  EXPECT_EQ(o->world_size(), 3);
}

TEST(LaunchCli, IfaceSetsGlooSocketIfnameForWorkers) {
  std::vector<std::string> args = {"rankwise-run", "--iface", "lo", "sh"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto o = cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->iface, "lo");
  launch::workers::AttemptConfig c;
  c.options = &*o;
  c.base_env = {"GLOO_SOCKET_IFNAME=eth9", "HOME=/root"};
  const auto env = launch::workers::worker_environment(c, 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "GLOO_SOCKET_IFNAME=lo"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "GLOO_SOCKET_IFNAME=eth9"), 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "HOME=/root"), 1);

  LaunchOptions plain;
  c.options = &plain;
  const auto kept = launch::workers::worker_environment(c, 0);  // without --iface the launcher's value passes
  EXPECT_EQ(std::count(kept.begin(), kept.end(), "GLOO_SOCKET_IFNAME=eth9"), 1);
}

TEST(LaunchCli, CpuSchedValuesAndTheirPolicies) {
  for (const auto& [name, policy] : std::vector<std::pair<std::string, CpuSched>>{
           {"inherit", CpuSched::kInherit}, {"normal", CpuSched::kNormal},
           {"batch", CpuSched::kBatch}, {"idle", CpuSched::kIdle}}) {
    std::vector<std::string> args = {"rankwise-run", "--cpu_sched", name, "sh"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    const auto o = cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
    ASSERT_TRUE(o.has_value());
    EXPECT_EQ(o->cpu_sched, policy) << name;
    EXPECT_EQ(launch::workers::cpu_sched_name(policy), name);
  }
  EXPECT_EQ(launch::workers::linux_sched_policy(CpuSched::kInherit), -1);
}

// An unprivileged launcher under SCHED_IDLE may not give its workers normal
// or batch: a usage error that says why (before: every worker "exited with
// code 127" after failing to start). In a child process that drops to
// nobody (when root; its RLIMIT_NICE stays 0) and moves to SCHED_IDLE.
TEST(LaunchCli, CpuSchedTheKernelRefusesIsAUsageError) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    std::string message = "no error";
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) message = "setuid";
    sched_param param{};
    if (::sched_setscheduler(0, SCHED_IDLE, &param) != 0) message = "sched_setscheduler";
    std::vector<std::string> args = {"rankwise-run", "--cpu-sched", "batch", "sh"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    try {
      if (message == "no error") cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
    } catch (const UsageError& e) {
      message = e.what();
    }
    const ssize_t written = ::write(fds[1], message.data(), message.size());
    _exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string message;
  char buf[1024];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(message,
            "--cpu-sched batch: the kernel refuses it (Operation not permitted): this launcher "
            "runs under SCHED_IDLE, which an unprivileged process may not leave (RLIMIT_NICE); "
            "give --cpu-sched inherit (or idle), or start rankwise-run under the policy you want "
            "(e.g. chrt -b 0 rankwise-run ...)");
}

/// parse_command_line over `args` (program name prepended), which must succeed.
LaunchOptions parsed(std::vector<std::string> args) {
  args.insert(args.begin(), "rankwise-run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto o = cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
  if (!o) throw std::runtime_error("help was printed");
  return *o;
}

TEST(LaunchCli, ARepeatedFlagTakesItsLastValueAsTorchrun) {
  // argparse keeps the last; CLI11's default would refuse "At Most 1".
  const LaunchOptions o = parsed({"--nproc-per-node", "1", "--nproc-per-node", "3", "--tee", "1",
                                  "--tee=2", "--standalone", "--standalone", "sh"});
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.tee, std::vector<unsigned>(3, 2u));
  EXPECT_TRUE(o.standalone);
}

TEST(LaunchCli, OnlyRanksListsAreKeptOnceInOrder) {
  EXPECT_EQ(parsed({"--nproc-per-node", "4", "--only-ranks", "3,0,3", "sh"}).only_ranks,
            (std::vector<int>{3, 0}));
  EXPECT_EQ(parsed({"--nproc-per-node", "2", "--local-ranks-filter", "1,1", "sh"})
                .local_ranks_filter,
            (std::vector<int>{1}));
  // What torchrun's int() accepts: spaces around, a sign (before: refused).
  EXPECT_EQ(parsed({"--nproc-per-node", "4", "--local-ranks-filter", "0, 1,+2,-0", "sh"})
                .local_ranks_filter,
            (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(parsed({"--nnodes", " +1", "--nproc-per-node", "+2 ", "sh"}).world_size(), 2);
}

/// Sets an environment variable for the life of the object.
class ScopedVariable {
 public:
  ScopedVariable(std::string name, const std::string& value) : name_(std::move(name)) {
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedVariable() { ::unsetenv(name_.c_str()); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  std::string name_;
};

TEST(LaunchCli, TorchrunEnvironmentDefaultsAreRead) {
  {
    // torchrun's PET_<DEST> defaults, dest in capitals.
    const ScopedVariable nproc("PET_NPROC_PER_NODE", "3"), nnodes("PET_NNODES", "2"),
        endpoint("PET_RDZV_ENDPOINT", "10.1.2.3:29402"), backend("PET_RDZV_BACKEND", "c10d"),
        id("PET_RDZV_ID", "J7"), tee("PET_TEE", "1"), restarts("PET_MAX_RESTARTS", "2"),
        prefix("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}| ");
    const LaunchOptions o = parsed({"sh"});
    EXPECT_EQ(o.nproc_per_node, 3);
    EXPECT_EQ(o.nnodes, 2);
    EXPECT_EQ(o.master_addr, "10.1.2.3");
    EXPECT_EQ(o.master_port, 29402);
    EXPECT_EQ(o.rdzv_backend, launch::cli::RdzvBackend::kC10d);
    EXPECT_EQ(o.run_id, "J7");
    EXPECT_EQ(o.tee, std::vector<unsigned>(3, 1u));
    EXPECT_EQ(o.max_restarts, 2);
    EXPECT_EQ(o.tag, "{rank}| ");
    // The command line wins over the environment.
    EXPECT_EQ(parsed({"--nproc-per-node", "1", "sh"}).nproc_per_node, 1);
  }
  {
    const ScopedVariable standalone("PET_STANDALONE", "1");
    EXPECT_TRUE(parsed({"sh"}).standalone);
  }
  {
    const ScopedVariable standalone("PET_STANDALONE", "0");
    EXPECT_FALSE(parsed({"sh"}).standalone);
  }
  {
    // A bad environment value is named like the flag's.
    const ScopedVariable nnodes("PET_NNODES", "two");
    try {
      parsed({"sh"});
      ADD_FAILURE() << "PET_NNODES=two was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--nnodes 'two'"), std::string::npos) << e.what();
    }
  }
}

TEST(LaunchCli, StandaloneSaysWhichStoreFlagsItIgnores) {
  const LaunchOptions o =
      parsed({"--standalone", "--rdzv-endpoint", "10.1.2.3:29403", "--master-port", "29403", "sh"});
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_FALSE(o.master_port.has_value());
  ASSERT_EQ(o.notices.size(), 2u);
  EXPECT_EQ(o.notices[0],
            "--standalone: ignoring --rdzv-endpoint '10.1.2.3:29403': a standalone job's store is "
            "on 127.0.0.1 at a free port (drop --standalone to use it)");
  EXPECT_NE(o.notices[1].find("ignoring --master-port '29403'"), std::string::npos);
  EXPECT_TRUE(parsed({"--standalone", "sh"}).notices.empty());
}

TEST(LaunchCli, TorchrunSlurmLineMeansTheStoreAtTheEndpoint) {
  // torchrun's multi-node recipe, with spaces, '=' and underscores.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-id", "J", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "10.1.2.3:29401", "sh"},
           {"--nnodes=2", "--nproc_per_node=2", "--rdzv_id=J", "--rdzv_backend=c10d",
            "--rdzv_endpoint=10.1.2.3:29401", "sh"}}) {
    const LaunchOptions o = parsed(args);
    EXPECT_EQ(o.nnodes, 2);
    EXPECT_EQ(o.world_size(), 4);
    EXPECT_EQ(o.master_addr, "10.1.2.3");
    EXPECT_EQ(o.master_port, 29401);
    EXPECT_EQ(o.run_id, "J");
    EXPECT_EQ(o.rdzv_backend, launch::cli::RdzvBackend::kC10d);
    EXPECT_TRUE(o.assign_node_rank);  // no --node-rank: the rendezvous numbers the nodes
    EXPECT_FALSE(o.is_host.has_value());
  }
  // The same store as --master-addr/--master-port, which may repeat it.
  const LaunchOptions same = parsed({"--nnodes", "2", "--node-rank", "1", "--master-addr",
                                     "10.1.2.3", "--master-port", "29401", "--rdzv-backend",
                                     "c10d", "--rdzv-endpoint", "10.1.2.3:29401", "sh"});
  EXPECT_EQ(same.master_addr, "10.1.2.3");
  EXPECT_EQ(same.master_port, 29401);
  EXPECT_EQ(same.node_rank, 1);
  EXPECT_FALSE(same.assign_node_rank);  // a given --node-rank is kept
  EXPECT_FALSE(parsed({"--nnodes", "2", "--master-port", "29500", "sh"}).assign_node_rank);
  EXPECT_EQ(parsed({"--nnodes", "2", "--rdzv-endpoint", "node0", "sh"}).master_port,
            launch::cli::kDefaultRdzvPort);
  EXPECT_EQ(parsed({"--nnodes", "3:3", "--master-port", "29500", "sh"}).nnodes, 3);
  EXPECT_EQ(parsed({"--nnodes", "1:1", "sh"}).nnodes, 1);  // torchrun's default spelling
  // IPv6 in brackets, for the endpoint and for --master-addr.
  const LaunchOptions v6 = parsed({"--rdzv-endpoint", "[::1]:29402", "sh"});
  EXPECT_EQ(v6.master_addr, "::1");
  EXPECT_EQ(v6.master_port, 29402);
  EXPECT_EQ(parsed({"--master-addr", "[::1]", "sh"}).master_addr, "::1");
  // Port 0 on one node: a free port, as torchrun's "localhost:0".
  EXPECT_FALSE(parsed({"--rdzv-endpoint", "localhost:0", "sh"}).master_port.has_value());
}

TEST(LaunchCli, RdzvEndpointAndConfParse) {
  const auto endpoint = [](const std::string& text) {
    const launch::cli::Endpoint e = launch::cli::parse_endpoint(text);
    return e.host + "|" + (e.port ? std::to_string(*e.port) : "-");
  };
  EXPECT_EQ(endpoint("node0"), "node0|-");
  EXPECT_EQ(endpoint(" node0:1 "), "node0|1");
  EXPECT_EQ(endpoint("[fd00::1]:29400"), "fd00::1|29400");
  EXPECT_EQ(endpoint("[fd00::1]"), "fd00::1|-");
  EXPECT_EQ(endpoint("h-1.example.com:0"), "h-1.example.com|0");
  EXPECT_THROW(launch::cli::parse_endpoint(""), UsageError);
  EXPECT_THROW(launch::cli::parse_endpoint("[fd00::1]x"), UsageError);
  EXPECT_EQ(launch::cli::without_brackets("[::1]"), "::1");
  EXPECT_EQ(launch::cli::without_brackets("node0"), "node0");

  EXPECT_EQ(launch::cli::parse_rdzv_backend("static"), launch::cli::RdzvBackend::kStatic);
  EXPECT_EQ(launch::cli::parse_rdzv_backend("c10d"), launch::cli::RdzvBackend::kC10d);

  const launch::cli::RdzvConf conf =
      launch::cli::parse_rdzv_conf(" join_timeout = 7 ,read_timeout=2.5,last_call_timeout=30,is_host=YES");
  EXPECT_EQ(conf.join_timeout, std::chrono::milliseconds(7000));
  EXPECT_EQ(conf.read_timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(conf.last_call_timeout, std::chrono::milliseconds(30000));
  EXPECT_EQ(conf.is_host, true);
  EXPECT_EQ(launch::cli::parse_rdzv_conf("timeout=9").join_timeout, std::chrono::milliseconds(9000));
  for (const char* no : {"0", "false", "F", "no", "n"}) {
    EXPECT_EQ(launch::cli::parse_rdzv_conf(std::string("is_host=") + no).is_host, false) << no;
  }
  const launch::cli::RdzvConf none = launch::cli::parse_rdzv_conf("");
  EXPECT_FALSE(none.join_timeout || none.read_timeout || none.last_call_timeout || none.is_host);

  // keep_alive_interval x keep_alive_max_attempt is the silence limit;
  // either alone keeps torchelastic's default for the other (5 s, 3).
  EXPECT_EQ(parsed({"sh"}).launcher_silence_limit, std::chrono::milliseconds(15000));
  EXPECT_EQ(parsed({"--rdzv-conf", "keep_alive_interval=1,keep_alive_max_attempt=5", "sh"})
                .launcher_silence_limit,
            std::chrono::milliseconds(5000));
  EXPECT_EQ(parsed({"--rdzv-conf", "keep_alive_interval=2", "sh"}).launcher_silence_limit,
            std::chrono::milliseconds(6000));
  EXPECT_EQ(parsed({"--rdzv-conf", "keep_alive_max_attempt=4", "sh"}).launcher_silence_limit,
            std::chrono::milliseconds(20000));

  // Onto the options: join_timeout is the rendezvous timeout, read_timeout the store's.
  const LaunchOptions o = parsed({"--rdzv-conf", "join_timeout=7,read_timeout=3", "sh"});
  EXPECT_EQ(o.rendezvous_timeout, std::chrono::milliseconds(7000));
  EXPECT_EQ(o.store_timeout, std::chrono::milliseconds(3000));
  EXPECT_FALSE(parsed({"sh"}).store_timeout.has_value());
  EXPECT_EQ(parsed({"--rdzv-conf", "join_timeout=60", "--rendezvous-timeout", "60", "sh"})
                .rendezvous_timeout,
            std::chrono::milliseconds(60000));
  // is_host: consistent with --node-rank, or free with node ranks by arrival.
  EXPECT_EQ(parsed({"--nnodes", "2", "--node-rank", "0", "--master-port", "29500", "--rdzv-conf",
                    "is_host=1", "sh"})
                .is_host,
            true);
  const LaunchOptions joiner = parsed({"--nnodes", "2", "--rdzv-backend", "c10d",
                                       "--rdzv-endpoint", "node0:29400", "--rdzv-conf",
                                       "is_host=0", "sh"});
  EXPECT_EQ(joiner.is_host, false);
  EXPECT_TRUE(joiner.assign_node_rank);
}

TEST(LaunchCli, TorchrunLoggingFlags) {
  const LaunchOptions o = parsed({"--nproc-per-node", "3", "-r", "0:1,2:3", "--tee", "2",
                                  "--local-ranks-filter", "0,2", "--log-dir", "/tmp/x", "sh"});
  EXPECT_EQ(o.redirects, (std::vector<unsigned>{1, 0, 3}));
  EXPECT_EQ(o.tee, (std::vector<unsigned>{2, 2, 2}));
  EXPECT_EQ(o.local_ranks_filter, (std::vector<int>{0, 2}));
  EXPECT_TRUE(launch::output::redirects_to_files(o));
  EXPECT_FALSE(launch::output::redirects_to_files(parsed({"--redirects", "0", "-t", "0", "sh"})));
  EXPECT_EQ(parsed({"--nproc-per-node", "2", "--redirects=3", "sh"}).redirects,
            (std::vector<unsigned>{3, 3}));
  EXPECT_EQ(launch::output::parse_stream_spec("1:2", "--tee", 2), (std::vector<unsigned>{0, 2}));
  EXPECT_EQ(launch::cli::parse_index_list("1", "--local-ranks-filter", "local rank", 2, ""),
            (std::vector<int>{1}));
  // torchrun's macros become --tag placeholders; braces and '$$' are literal.
  EXPECT_EQ(parsed({"--role", "trainer", "--log-line-prefix-template",
                    "${hostname}:$rank/${local_rank} {${role_name}} $$ $other: ", "sh"})
                .tag,
            "{host}:{rank}/{local_rank} {{trainer}} $ $other: ");
  EXPECT_EQ(launch::output::tag_from_torchrun_template("[${role_name}${local_rank}]:", "default"),
            "[default{local_rank}]:");
  EXPECT_EQ(launch::output::tag_from_torchrun_template("${unclosed", "r"), "${{unclosed");
}

TEST(LaunchCli, TorchrunFlagsWithoutEffectAreAccepted) {
  const LaunchOptions o = parsed({"--no-python", "--no_python", "--start-method", "fork",
                                  "--event-log-handler", "null", "--signals-to-handle",
                                  "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "--shutdown-timeout", "7",
                                  "--role", "trainer", "--rdzv-conf", "last_call_timeout=30",
                                  "--rdzv-backend", "static", "sh"});
  EXPECT_EQ(o.grace_period, std::chrono::milliseconds(7000));
  EXPECT_EQ(o.role, "trainer");
  launch::workers::AttemptConfig c;
  c.options = &o;
  const auto env = launch::workers::worker_environment(c, 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "ROLE_NAME=trainer"), 1);
}

/// Every flag of torchrun's parser (torch 2.15's torch/distributed/run.py),
/// with a value where it takes one.
const std::vector<std::pair<std::string, std::string>> kTorchrunFlags = {
    {"--nnodes", "1"}, {"--nproc-per-node", "1"}, {"--rdzv-backend", "c10d"},
    {"--rdzv-endpoint", "127.0.0.1:0"}, {"--rdzv-id", "J"}, {"--rdzv-conf", "join_timeout=5"},
    {"--standalone", ""}, {"--max-restarts", "1"}, {"--monitor-interval", "1"},
    {"--start-method", "spawn"}, {"--event-log-handler", "null"}, {"--role", "r"},
    {"-m", ""}, {"--module", ""}, {"--no-python", ""}, {"--run-path", ""},
    {"--log-dir", "/tmp/rankwise-cli-logs"}, {"-r", "3"}, {"--redirects", "3"}, {"-t", "3"},
    {"--tee", "3"}, {"--log-line-prefix-template", "${rank}: "}, {"--local-ranks-filter", "0"},
    {"--duplicate-stdout-filters", "a"}, {"--duplicate-stderr-filters", "a"},
    {"--node-rank", "0"}, {"--master-addr", "127.0.0.1"}, {"--master-port", "29500"},
    {"--local-addr", "127.0.0.1"}, {"--logs-specs", "x"}, {"--numa-binding", "node"},
    {"--signals-to-handle", "SIGTERM"}, {"--shutdown-timeout", "30"},
    {"--virtual-local-rank", ""}, {"--print-completion", "bash"}, {"-h", ""}};

/// The torchrun flags rankwise-run refuses (docs/launcher.md's table); every
/// other one must parse.
const std::set<std::string> kRefusedTorchrunFlags = {
    "-m", "--module", "--run-path", "--duplicate-stdout-filters", "--duplicate-stderr-filters",
    "--local-addr", "--logs-specs", "--numa-binding", "--print-completion"};

TEST(LaunchCli, EveryTorchrunFlagIsSupportedOrRefusedByName) {
  for (const auto& [flag, value] : kTorchrunFlags) {
    // Both spellings: torchrun takes every long flag with dashes and underscores.
    std::vector<std::string> spellings = {flag};
    if (flag.size() > 2 && flag.find('-', 2) != std::string::npos) {
      std::string underscored = flag;
      std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
      spellings.push_back(underscored);
    }
    for (const std::string& spelling : spellings) {
      std::vector<std::string> args = {"rankwise-run", spelling};
      if (!value.empty()) args.push_back(value);
      args.push_back("sh");
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      const bool refused = kRefusedTorchrunFlags.count(flag) != 0;
      try {
        testing::internal::CaptureStdout();  // -h prints the help
        const auto parsed = cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
        testing::internal::GetCapturedStdout();
        EXPECT_FALSE(refused) << spelling << " was accepted";
        EXPECT_EQ(parsed.has_value(), flag != "-h") << spelling;  // -h: help printed, no run
      } catch (const UsageError& e) {
        EXPECT_TRUE(refused) << spelling << " was refused: " << e.what();
        testing::internal::GetCapturedStdout();
        const std::string msg = e.what();
        // Refused: the message names the flag (dashes) and says what to do instead.
        EXPECT_EQ(msg.find(flag == "-m" || flag == "--module" ? "-m/--module" : flag), 0u)
            << spelling << ": " << msg;
        EXPECT_NE(msg.find("not supported: "), std::string::npos) << spelling << ": " << msg;
      }
    }
  }
}

}  // namespace

TEST(LaunchCli, DeadlockTimeoutIsOnByDefault) {
  EXPECT_EQ(parsed({"sh"}).deadlock_timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(parsed({"--deadlock-timeout", "2.5", "sh"}).deadlock_timeout,
            std::chrono::milliseconds(2500));
  EXPECT_EQ(parsed({"--deadlock_timeout", "0", "sh"}).deadlock_timeout, std::chrono::milliseconds(0));
  EXPECT_NE(usage_error({"--deadlock-timeout", "-1", "sh"}).find("--deadlock-timeout -1: must be "
                                                                 "zero or more seconds"),
            std::string::npos);
}

TEST(LaunchCli, MonitorAndStragglerFlags) {
  const LaunchOptions off = parsed({"sh"});
  EXPECT_FALSE(off.monitor);
  EXPECT_EQ(off.straggler_threshold, 0.2);
  EXPECT_EQ(off.straggler_window, std::chrono::milliseconds(5000));
  EXPECT_EQ(parsed({"--monitor", "sh"}).monitor, std::chrono::milliseconds(0));  // the default
  EXPECT_EQ(parsed({"--monitor=2.5", "sh"}).monitor, std::chrono::milliseconds(2500));
  // The flag alone: what follows is the program, not its value.
  const LaunchOptions alone = parsed({"--monitor", "sh", "-c", "true"});
  EXPECT_EQ(alone.program_argv, (std::vector<std::string>{"sh", "-c", "true"}));
  const LaunchOptions s = parsed({"--straggler-threshold", "50", "--straggler_window", "10", "sh"});
  EXPECT_EQ(s.straggler_threshold, 0.5);
  EXPECT_EQ(s.straggler_window, std::chrono::milliseconds(10000));
  EXPECT_NE(usage_error({"--monitor=x", "sh"}).find("--monitor=x: expected a number of seconds"),
            std::string::npos);
  EXPECT_NE(usage_error({"--monitor=0", "sh"}).find("--monitor 0: must be a positive number"),
            std::string::npos);
  EXPECT_NE(usage_error({"--straggler-threshold", "0", "sh"}).find("--straggler-threshold 0"),
            std::string::npos);
  EXPECT_NE(usage_error({"--straggler-window", "-1", "sh"}).find("--straggler-window -1"),
            std::string::npos);
}

}  // namespace rankwise::launch

namespace rankwise::launch {
namespace {

// The UsageError check_virtual_local_rank throws for 2 workers, or "" when none.
std::string virtual_local_rank_error(const std::optional<std::string>& visible, int driver_gpus) {
  LaunchOptions o;
  o.virtual_local_rank = true;
  o.nproc_per_node = 2;
  try {
    cli::check_virtual_local_rank(o, visible, driver_gpus);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

// A new user's probe: "3,3", "3," and "0,x,1" used to reach the workers,
// which then shared one GPU (NCCL refuses), lost theirs, or failed on a
// value the user never typed.
TEST(LaunchVirtualLocalRank, EveryWorkerGetsAGpuOfItsOwnOrNoneDoes) {
  EXPECT_EQ(virtual_local_rank_error(std::string("3,5"), 8), "");
  EXPECT_EQ(virtual_local_rank_error(std::string(" 3, 5 ,7"), 8), "");  // spaces trimmed, extras unused
  EXPECT_EQ(virtual_local_rank_error(std::nullopt, 2), "");
  EXPECT_EQ(virtual_local_rank_error(std::nullopt, 0), "");  // no driver: every worker on the CPU
  EXPECT_NE(virtual_local_rank_error(std::string("3,3"), 8).find("CUDA_VISIBLE_DEVICES='3,3', which is invalid: "
                                                                  "entry '3' repeats '3'"),
            std::string::npos);
  EXPECT_NE(virtual_local_rank_error(std::string("3,"), 8).find("entry 2 ('') is an empty entry"), std::string::npos);
  EXPECT_NE(virtual_local_rank_error(std::string("0,x,1"), 8).find("entry 2 ('x') is not a device index"),
            std::string::npos);
  EXPECT_NE(virtual_local_rank_error(std::string("3"), 8).find("CUDA_VISIBLE_DEVICES='3' lists 1 for "
                                                               "--nproc-per-node 2"),
            std::string::npos);
  for (const char* hidden : {"", "-1"}) {
    EXPECT_NE(virtual_local_rank_error(std::string(hidden), 8).find("' hides every GPU for --nproc-per-node 2"),
              std::string::npos)
        << hidden;
  }
  EXPECT_NE(virtual_local_rank_error(std::nullopt, 1).find("this node has 1 (the NVIDIA driver's "
                                                           "/proc/driver/nvidia/gpus) for --nproc-per-node 2"),
            std::string::npos);
  LaunchOptions without;
  without.nproc_per_node = 2;
  EXPECT_NO_THROW(cli::check_virtual_local_rank(without, std::string("3,3"), 1));
}

}  // namespace
}  // namespace rankwise::launch
