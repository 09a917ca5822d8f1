// End-to-end tests of rankwise-run: each test starts the built launcher on the
// launch_probe worker program (tests/programs/launch_probe.cpp) and checks its
// exact output, exit code and timing. The launcher picks its own free port, so
// these tests run in parallel safely.
#include <gtest/gtest.h>

#include <sched.h>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch/rendezvous/free_port.h"
#include "launch/output/line_assembler.h"
#include "support/launcher.h"
#include "support/shell.h"
#include "support/store.h"

namespace {

using namespace rankwise::test;
const std::string kProbe = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/launch_probe";
const std::string kPeerFailure = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_peer_failure";
const std::string kSizeMismatch = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_size_mismatch";

/// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char templ[] = "/tmp/rankwise-launch-test-XXXXXX";
    if (!::mkdtemp(templ)) std::abort();
    path_ = templ;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Waits until every file exists (generous deadline for a loaded machine).
bool wait_for_files(const std::vector<std::string>& paths, double timeout_s = 30) {
  return eventually([&] {
    return std::all_of(paths.begin(), paths.end(), [](const auto& p) { return std::filesystem::exists(p); });
  }, timeout_s);
}

/// True while `pid` exists and is not a zombie.
bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

std::vector<pid_t> read_pids(const TempDir& dir, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) pids.push_back(std::stoi(read_file(dir / ("pid_" + std::to_string(r)))));
  return pids;
}

std::vector<std::string> pid_files(const TempDir& dir, int n) {
  std::vector<std::string> files;
  for (int r = 0; r < n; ++r) files.push_back(dir / ("pid_" + std::to_string(r)));
  return files;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string::size_type start = 0, nl;
  while ((nl = text.find('\n', start)) != std::string::npos) {
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// How many times `needle` occurs in `haystack`.
int occurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

/// The launcher's failure summary in `err`: from its banner to its closing line.
std::string failure_summary(const std::string& err) {
  const auto start = err.find("rankwise-run: ================ job failed");
  if (start == std::string::npos) return "";
  const auto end = err.find("rankwise-run: ==========================================\n", start);
  return err.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Same as spam_line() in launch_probe.cpp.
std::string spam_line(int rank, int i, int len) {
  std::string s = "rank=" + std::to_string(rank) + " line=" + std::to_string(i) + " ";
  while (static_cast<int>(s.size()) < len) s += static_cast<char>('a' + (i + s.size()) % 26);
  s.resize(static_cast<size_t>(len));
  return s;
}

TEST(LaunchRun, ManyRanksManyLinesStayWholeAndTagged) {
  const Result r = run({"--nproc-per-node", "4", kProbe, "spam", "2000", "150"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 8000u);
  ASSERT_EQ(r.out.back(), '\n');
  std::vector<int> next(4, 0);
  for (const auto& line : lines) {
    ASSERT_EQ(line.rfind("[rank", 0), 0u) << line;
    const int rank = line[5] - '0';
    ASSERT_TRUE(rank >= 0 && rank < 4) << line;
    ASSERT_EQ(line, "[rank" + std::to_string(rank) + "]: " + spam_line(rank, next[rank], 150));
    ++next[rank];
  }
  EXPECT_EQ(next, (std::vector<int>{2000, 2000, 2000, 2000}));
  EXPECT_EQ(r.err, "");
}

TEST(LaunchRun, FailingRankStopsTheOthersAndIsNamed) {
  TempDir dir;
  Launcher l({"--nproc-per-node", "3", kProbe, "fail", "1", "3", dir.path()});
  const Result r = l.wait();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_TRUE(contains(r.err, "root cause (first failure): rank 1 (local rank 1) on host ")) << r.err;
  EXPECT_TRUE(contains(r.err, " exited with code 3\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "  exit code:  3\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "  last 10 lines of stderr:\n    error line 2\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "    error line 11\n")) << r.err;
  EXPECT_TRUE(contains(r.err, ": terminated (SIGTERM)\n")) << r.err;
  // The failing rank's stderr also went through, tagged.
  EXPECT_TRUE(contains(r.err, "[rank1]: error line 0\n")) << r.err;
  ASSERT_TRUE(wait_for_files(pid_files(dir, 3), 1));
  const auto pids = read_pids(dir, 3);
  EXPECT_TRUE(contains(r.err, "  pid:        " + std::to_string(pids[1]) + "\n")) << r.err;
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "worker " << pid << " survived";
}

TEST(LaunchRun, KilledWorkerIsNamedWithItsSignal) {
  TempDir dir;
  Launcher l({"--nproc-per-node", "3", kProbe, "hang", dir.path()});
  ASSERT_TRUE(wait_for_files(pid_files(dir, 3)));
  const auto pids = read_pids(dir, 3);
  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  const Result r = l.wait();
  EXPECT_LT(since(killed_at), 10.0);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause (first failure): rank 1 (local rank 1)")) << r.err;
  EXPECT_TRUE(contains(r.err, "was killed by SIGKILL (signal 9)")) << r.err;
  EXPECT_TRUE(contains(r.err, "  signal:     SIGKILL (9)\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (pid " + std::to_string(pids[0]) + "): terminated (SIGTERM)"))
      << r.err;
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid));
}

TEST(LaunchRun, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  // Rank 1 fails only once rank 0 ignores SIGTERM (else, under load, SIGTERM
  // could arrive before the trap and the test would see SIGTERM, not SIGKILL).
  // Rank 0's own child (a `sleep 30` that ignores SIGTERM too) is stopped
  // with it: the README's "processes a worker starts are stopped with it".
  TempDir dir;
  const std::string ready = dir.path() + "/ready";
  const std::string child = dir.path() + "/child";
  const Result r = run({"--nproc-per-node", "2", "--grace-period", "1", "/bin/sh", "-c",
                        "if [ $RANK = 1 ]; then while [ ! -f " + ready +
                            " ]; do sleep 0.05; done; exit 3; fi; trap '' TERM; sleep 30 & echo $! > " +
                            child + "; touch " + ready + "; wait"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_GE(r.seconds, 1.0);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_TRUE(contains(r.err, "root cause (first failure): rank 1 ")) << r.err;
  EXPECT_TRUE(contains(r.err, ": terminated (SIGKILL)\n")) << r.err;
  pid_t sleeper = 0;
  std::ifstream(child) >> sleeper;
  ASSERT_GT(sleeper, 0) << "rank 0 did not record its child";
  eventually([&] { return !process_alive(sleeper); }, 5);  // SIGKILL takes effect at once
  EXPECT_FALSE(process_alive(sleeper)) << "rank 0's child " << sleeper << " outlived the job";
  if (process_alive(sleeper)) ::kill(sleeper, SIGKILL);
}

// --virtual-local-rank (torchrun's): LOCAL_RANK 0 and one GPU per worker,
// the launcher's CUDA_VISIBLE_DEVICES entry for its local rank (or its index).
TEST(LaunchRun, VirtualLocalRankGivesEachWorkerItsOwnGpu) {
  const std::vector<std::string> show = {"--nproc-per-node", "2", "--virtual-local-rank", "/bin/sh",
                                         "-c", "echo \"$LOCAL_RANK $CUDA_VISIBLE_DEVICES $RANKWISE_VIRTUAL_LOCAL_RANK\""};
  const Result listed = run(show, {{"CUDA_VISIBLE_DEVICES", "5,7"}});
  EXPECT_EQ(listed.code, 0) << listed.err;
  EXPECT_TRUE(contains(listed.out, "[rank0]: 0 5 1\n")) << listed.out;
  EXPECT_TRUE(contains(listed.out, "[rank1]: 0 7 1\n")) << listed.out;
  std::vector<std::string> underscored = show;
  underscored[2] = "--virtual_local_rank";
  const Result unlisted = run(underscored);
  EXPECT_EQ(unlisted.code, 0) << unlisted.err;
  EXPECT_TRUE(contains(unlisted.out, "[rank1]: 0 1 1\n")) << unlisted.out;
  const Result too_few = run(show, {{"CUDA_VISIBLE_DEVICES", "3"}});
  EXPECT_EQ(too_few.code, 2) << too_few.err;
  EXPECT_TRUE(contains(too_few.err, "--virtual-local-rank gives each worker its own GPU, but "
                                    "CUDA_VISIBLE_DEVICES='3' lists 1 for --nproc-per-node 2"))
      << too_few.err;
  // Entries are handed out trimmed, as torchrun does.
  const Result spaced = run(show, {{"CUDA_VISIBLE_DEVICES", " 5, 7"}});
  EXPECT_EQ(spaced.code, 0) << spaced.err;
  EXPECT_TRUE(contains(spaced.out, "[rank1]: 0 7 1\n")) << spaced.out;
}

TEST(LaunchRun, SigintReachesEveryWorkerAndExits130) {
  TempDir dir;
  Launcher l({"--nproc-per-node", "3", kProbe, "hang", dir.path()});
  ASSERT_TRUE(wait_for_files(pid_files(dir, 3)));
  const auto pids = read_pids(dir, 3);
  const auto sent_at = Clock::now();
  ASSERT_EQ(::kill(l.pid(), SIGINT), 0);
  const Result r = l.wait();
  EXPECT_LT(since(sent_at), 10.0);
  EXPECT_EQ(r.code, 130) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(std::filesystem::exists(dir / ("sigint_" + std::to_string(rank))))
        << "rank " << rank << " did not get SIGINT";
  }
  EXPECT_TRUE(contains(r.err, "received SIGINT; forwarding it to every worker")) << r.err;
  EXPECT_FALSE(contains(r.err, "job failed")) << r.err;
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid));
}

TEST(LaunchRun, WorkersDieWhenTheLauncherIsKilled) {
  TempDir dir;
  Launcher l({"--nproc-per-node", "2", kProbe, "hang", dir.path()});
  ASSERT_TRUE(wait_for_files(pid_files(dir, 2)));
  const auto pids = read_pids(dir, 2);
  ASSERT_EQ(::kill(l.pid(), SIGKILL), 0);
  const Result r = l.wait();
  EXPECT_EQ(r.code, 128 + SIGKILL);
  EXPECT_TRUE(eventually([&] { return std::none_of(pids.begin(), pids.end(), process_alive); }, 10))
      << "a worker outlived the SIGKILLed launcher";
}

// Every thread of every worker gets the --cpu-sched policy (read back from
// /proc by the worker); the default, inherit, keeps the launcher's.
TEST(LaunchRun, CpuSchedReachesEveryThreadOfEveryWorker) {
  for (const char* policy : {"batch", "idle", "normal"}) {
    const Result r = run({"--nproc-per-node", "2", "--cpu-sched", policy, kProbe, "sched"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto lines = split_lines(r.out);
    EXPECT_EQ(lines.size(), 4u) << r.out;  // 2 ranks x 2 threads
    for (const auto& line : lines) {
      EXPECT_NE(line.find(std::string("]: sched ") + policy), std::string::npos) << policy << ": " << r.out;
    }
  }
  const Result defaults = run({"--nproc-per-node", "1", kProbe, "sched"});
  EXPECT_EQ(defaults.out, "[rank0]: sched normal\n[rank0]: sched normal\n") << defaults.err;
  // A launcher started under SCHED_BATCH passes it on, unless told otherwise.
  const std::string under_batch = std::string("/usr/bin/chrt -b 0 ") + RANKWISE_RUN_PATH + " --nproc-per-node 1 ";
  EXPECT_EQ(rankwise::test::shell(under_batch + kProbe + " sched 2>/dev/null"),
            "[rank0]: sched batch\n[rank0]: sched batch\n");
  EXPECT_EQ(rankwise::test::shell(under_batch + "--cpu-sched normal " + kProbe + " sched 2>/dev/null"),
            "[rank0]: sched normal\n[rank0]: sched normal\n");
}

TEST(LaunchRun, RestartsAfterAFailure) {
  const Result r = run({"--nproc-per-node", "2", "--max-restarts", "1", kProbe, "restart"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "[rank1]: failing on attempt 0\n")) << r.err;
  EXPECT_TRUE(contains(
      r.err, "rankwise-run: attempt 0 failed (rank 1 exited with code 3); restarting (1/1)\n"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "job failed")) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank0]: ok on attempt 1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank1]: ok on attempt 1\n")) << r.out;
}

// 2 workers on the one core the launcher may use: said once, the job runs.
TEST(LaunchRun, MoreWorkersThanCoresIsAWarning) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // the launcher inherits it
  const Result r = Launcher({"--nproc-per-node", "2", kProbe, "echo", "x"}).wait();  // unfiltered
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "2 workers on this node and 1 CPU core for them: workers training on "
                              "the CPU take turns"))
      << r.err;
  const Result fits = Launcher({"--nproc-per-node", "1", kProbe, "echo", "x"}).wait();
  EXPECT_FALSE(contains(fits.err, "CPU core")) << fits.err;
}

TEST(LaunchRun, GivesUpAfterMaxRestarts) {
  const Result r = run({"--nproc-per-node", "2", "--max-restarts", "1", kProbe, "restart", "always"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "restarting (1/1)\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "(attempt 1)\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "rankwise-run: giving up after 1 restarts\n")) << r.err;
}

TEST(LaunchRun, BadUsageExits2NamingTheProblem) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string expected;
    std::map<std::string, std::string> env;
  };
  // A few end to end (exit code and message); tests/unit/launch/cli/parse_test.cpp
  // checks every other bad-usage case in-process, without a libtorch load each.
  const std::vector<Case> cases = {
      {{"--nproc-per-node", "0", kProbe, "echo"}, "--nproc-per-node 0: must be at least 1", {}},
      {{}, "no PROGRAM given", {}},
      {{dir / "missing"}, "program '" + dir.path() + "/missing' not found", {}},
      {{"--tag", "[{rnk}] ", kProbe, "echo"}, "--tag '[{rnk}] ': unknown placeholder {rnk}", {}},
      {{"--nproc-per-node", "gpu", kProbe, "echo"}, "--nproc-per-node gpu: no GPU is visible",
       {{"CUDA_VISIBLE_DEVICES", ""}}},
      // Where the store cannot be: each named for what it is (not "the port may be in use").
      {{"--master-addr", "no-such-host.invalid", kProbe, "echo"},
       "cannot resolve master address 'no-such-host.invalid'", {}},
      {{"--master-addr", "no-such-host.invalid", "--master-port", "29417", kProbe, "echo"},
       "cannot resolve master address 'no-such-host.invalid': Name or service not known; check "
       "--master-addr",
       {}},
      // A node that joins (node rank 1) is told at once, not after the timeout.
      {{"--nnodes", "2", "--node-rank", "1", "--master-addr", "no-such-host.invalid",
        "--master-port", "29419", kProbe, "echo"},
       "cannot resolve master address 'no-such-host.invalid'",
       {}},
      {{"--master-addr", "192.0.2.1", "--master-port", "29418", kProbe, "echo"},
       "cannot host the rendezvous store at 192.0.2.1:29418: '192.0.2.1' is not an address of "
       "this node",
       {}},
  };
  // Start them all at once: each launcher start costs a libtorch load.
  std::vector<std::unique_ptr<Launcher>> launchers;
  for (const auto& c : cases) launchers.push_back(std::make_unique<Launcher>(c.args, c.env));
  for (size_t i = 0; i < cases.size(); ++i) {
    const Result r = launchers[i]->wait();
    std::string cmd;
    for (const auto& a : cases[i].args) cmd += " " + a;
    EXPECT_EQ(r.code, 2) << "rankwise-run" << cmd << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "rankwise-run: error: ")) << cmd << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, cases[i].expected)) << "rankwise-run" << cmd << "\n" << r.err;
    EXPECT_EQ(r.out, "") << cmd;
  }
}

TEST(LaunchRun, HelpDocumentsEveryFlag) {
  const Result r = run({"-h"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag :
       {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
        "--standalone", "--tag", "--no-tag", "--only-ranks", "--log-dir", "--group-by-rank",
        "--max-restarts", "--monitor-interval", "--run-id", "--grace-period",
        "--rendezvous-timeout", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf",
        "--redirects", "--tee", "--local-ranks-filter", "--no-python", "--role",
        "--log-line-prefix-template", "--shutdown-timeout", "--start-method", "--event-log-handler",
        "--signals-to-handle", "--cpu-sched", "--hang-timeout", "--iface", "--monitor",
        "--straggler-threshold", "--straggler-window", "Examples:", "Exit codes:",
        "PROGRAM [ARGS...]"}) {
    EXPECT_TRUE(contains(r.out, flag)) << flag;
  }
}

TEST(LaunchRun, WorkerEnvironmentAndArgumentsPassThrough) {
  const Result r = run({"--nproc_per_node", "2", "--run-id", "job7", kProbe, "env"},
                       {{"OMP_NUM_THREADS", "3"}, {"RANK", "99"}, {"RANKWISE_STDOUT_IS_TTY", "1"}});
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string t = "[rank" + std::to_string(rank) + "]: ";
    for (const std::string& kv :
         {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank),
          std::string("WORLD_SIZE=2"), std::string("LOCAL_WORLD_SIZE=2"), std::string("GROUP_RANK=0"),
          std::string("MASTER_ADDR=127.0.0.1"), std::string("RANKWISE_RESTART_COUNT=0"),
          std::string("TORCHELASTIC_RESTART_COUNT=0"), std::string("RANKWISE_AGENT_STORE=1"),
          std::string("TORCHELASTIC_RUN_ID=job7"), std::string("OMP_NUM_THREADS=3"),
          // stdout is a pipe here, not a terminal: the launcher's own value is replaced.
          std::string("RANKWISE_STDOUT_IS_TTY=0")}) {
      EXPECT_TRUE(contains(r.out, t + kv + "\n")) << kv << "\n" << r.out;
    }
    EXPECT_TRUE(contains(r.out, t + "RANKWISE_ERROR_FILE=/")) << r.out;
  }
  EXPECT_FALSE(contains(r.out, "MASTER_PORT=<unset>"));
  EXPECT_FALSE(contains(r.err, "OMP_NUM_THREADS")) << r.err;  // set by the user: no note

  const Result e = run({"--no-tag", kProbe, "echo", "--nproc-per-node", "7", "-h", "--", "x y"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out, "--nproc-per-node\n7\n-h\n--\nx y\n");

  const Result n = run({"--no-tag", kProbe, "env"}, {{"OMP_NUM_THREADS", ""}});
  EXPECT_TRUE(contains(n.err, "OMP_NUM_THREADS")) << n.err;
}

TEST(LaunchRun, TagTemplatesAndNoTag) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const Result r = run({"--nproc-per-node", "2", "--tag", "<{host}|{node_rank}|{local_rank}/{world_size}|{rank}> ",
                        kProbe, "split"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string t = std::string("<") + host + "|0|" + std::to_string(rank) + "/2|" +
                          std::to_string(rank) + "> ";
    EXPECT_TRUE(contains(r.out, t + "out " + std::to_string(rank) + "\n")) << r.out;
    EXPECT_TRUE(contains(r.err, t + "err " + std::to_string(rank) + "\n")) << r.err;
  }
  const Result n = run({"--no-tag", kProbe, "split"});
  EXPECT_EQ(n.out, "out 0\n");
  EXPECT_EQ(n.err, "err 0\n");
}

TEST(LaunchRun, OnlyRanksFiltersStdoutNotStderr) {
  const Result r = run({"--nproc-per-node", "4", "--only-ranks", "0,3", kProbe, "split"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = split_lines(r.out), err = split_lines(r.err);
  std::sort(out.begin(), out.end());
  std::sort(err.begin(), err.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank0]: out 0", "[rank3]: out 3"}));
  EXPECT_EQ(err, (std::vector<std::string>{"[rank0]: err 0", "[rank1]: err 1", "[rank2]: err 2",
                                           "[rank3]: err 3"}));
}

TEST(LaunchRun, LogDirHoldsEachRanksFullOutput) {
  TempDir dir;
  const std::string logs = dir / "logs";
  const Result r =
      run({"--nproc-per-node", "2", "--only-ranks", "0", "--log-dir", logs, kProbe, "split"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string base = logs + "/attempt_0/rank_" + std::to_string(rank);
    EXPECT_EQ(read_file(base + ".stdout"), "out " + std::to_string(rank) + "\n");
    EXPECT_EQ(read_file(base + ".stderr"), "err " + std::to_string(rank) + "\n");
  }
  EXPECT_EQ(r.out, "[rank0]: out 0\n");  // the console still honours --only-ranks
}

TEST(LaunchRun, GroupByRankPrintsBlocksInRankOrder) {
  const Result r = run({"--nproc-per-node", "3", "--group-by-rank", kProbe, "lines", "4"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::string expected_out, expected_err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string t = "[rank" + std::to_string(rank) + "]: rank " + std::to_string(rank);
    for (int k = 0; k < 4; ++k) expected_out += t + " line " + std::to_string(k) + "\n";
    expected_err += t + " err\n";
  }
  EXPECT_EQ(r.out, expected_out);
  EXPECT_EQ(r.err, expected_err);
}

TEST(LaunchRun, OutputWithoutFinalNewlineIsFlushedAtExit) {
  const Result r = run({kProbe, "nonewline"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank0]: no newline here\n");
}

TEST(LaunchRun, VeryLongLineIsSplitWithMarker) {
  const int bytes = 100 * 1024;
  const Result r = run({"--nproc-per-node", "2", kProbe, "longline", std::to_string(bytes)});
  ASSERT_EQ(r.code, 0) << r.err;
  std::string full;
  for (int i = 0; i < bytes; ++i) full += static_cast<char>('a' + i % 26);
  const std::string marker(rankwise::launch::output::kContinuationMarker);
  const size_t cut = rankwise::launch::output::kMaxLineBytes;
  // Each piece is a whole tagged line; the two ranks' pieces may interleave.
  const auto lines = split_lines(r.out);
  EXPECT_EQ(lines.size(), 4u);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string t = "[rank" + std::to_string(rank) + "]: ";
    std::vector<std::string> mine;
    for (const std::string& line : lines)
      if (line.rfind(t, 0) == 0) mine.push_back(line);
    ASSERT_EQ(mine.size(), 2u) << "rank " << rank;
    EXPECT_EQ(mine[0], t + full.substr(0, cut) + marker) << "rank " << rank;
    EXPECT_EQ(mine[1], t + full.substr(cut)) << "rank " << rank;
  }
  EXPECT_EQ(marker, " [rankwise-run: line continues]");
}

TEST(LaunchRun, CarriageReturnProgressBarsCollapse) {
  const Result r = run({kProbe, "progress"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank0]: step 5/5\n[rank0]: done\n");
}

TEST(LaunchRun, InvalidUtf8PassesThrough) {
  const Result r = run({kProbe, "bytes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("[rank0]: bad \xff\xfe utf8 \xc3\n"));
}

TEST(LaunchRun, SummaryShowsTheErrorFile) {
  // A JSON object's "message", or the file's whole text when it is not one.
  Launcher json({"--nproc-per-node", "2", kProbe, "errorfile",
                 "{\"message\": \"CUDA out of memory on rank 1\"}"});
  Launcher text({"--nproc-per-node", "2", kProbe, "errorfile", "disk full\nwhile saving\n"});
  for (auto [r, expected] : {std::pair{json.wait(), std::string("CUDA out of memory on rank 1\n")},
                             std::pair{text.wait(), std::string("disk full\n              while saving\n")}}) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "root cause (first failure): rank 1 ")) << r.err;
    EXPECT_TRUE(contains(r.err, "  error:      " + expected)) << r.err;
  }
}

// The summary names an error file only where it still exists once the
// launcher has exited: in --log-dir. Without it, the file was in the
// launcher's temporary directory, and the summary says it is gone.
TEST(LaunchRun, SummaryNamesTheErrorFileOnlyWhenItIsKept) {
  const Result gone = run({"--nproc-per-node", "2", kProbe, "errorfile", "disk full"});
  EXPECT_EQ(gone.code, 1) << gone.err;
  EXPECT_TRUE(contains(gone.err, "  error:      disk full\n")) << gone.err;
  EXPECT_TRUE(contains(gone.err, "  error file: removed when rankwise-run exits (written ")) << gone.err;
  EXPECT_TRUE(contains(gone.err, "give --log-dir DIR to keep it as DIR/attempt_0/error_rank1.json"))
      << gone.err;
  TempDir dir;
  const Result kept =
      run({"--nproc-per-node", "2", "--log-dir", dir.path(), kProbe, "errorfile", "disk full"});
  EXPECT_EQ(kept.code, 1) << kept.err;
  const std::string path = dir.path() + "/attempt_0/error_rank1.json";
  EXPECT_TRUE(contains(kept.err, "  error file: " + path + " (written ")) << kept.err;
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "disk full") << path;
}

// Ranks all_reduce tensors of different sizes with the collective check off:
// Gloo aborts the rank whose tensor is smaller ("[enforce fail at pair.cc]
// op.preamble.length <= op.nbytes. 1024 vs 12"). The summary says what that
// means and names the collective, from that rank's flight recorder.
TEST(LaunchRun, AGlooSizeCheckIsExplainedWithItsCollective) {
  const Result r = run({"--nproc-per-node", "2", kSizeMismatch});
  EXPECT_EQ(r.code, 1) << r.err;
  const std::string summary = failure_summary(r.err);
  EXPECT_TRUE(contains(summary, "root cause (first failure): rank 1 ")) << r.err;
  EXPECT_TRUE(contains(summary, "was killed by SIGABRT")) << r.err;
  EXPECT_TRUE(std::regex_search(
      summary, std::regex("  error: +rankwise: rank 1/2: Gloo aborted this process in all_reduce "
                          "#1 \\(Float \\[3\\], sum\\) at torch_size_mismatch\\.cpp:[0-9]+: the "
                          "ranks sent different sizes to the same collective \\(a peer sent "
                          "[0-9]+ bytes where this rank expected at most [0-9]+\\)")))
      << r.err;
  EXPECT_TRUE(contains(summary, "op.preamble.length <= op.nbytes")) << r.err;
}

// Rank 1 raises "boom" and is then slow to exit; rank 0, blocked in a
// barrier, fails on the closed connection and exits first. The root cause is
// rank 1 and its message, shown once: whether rank 1 wrote its error file
// before rank 0 failed (slow at exit, after the process group's teardown) or
// after (slow while unwinding, after its group was shut down), and whether
// rank 0's error is rankwise's PeerError or c10d's raw one.
TEST(LaunchRun, RootCauseIsTheRankThatRaisedNotThePeerThatFailedOnItsClosedConnection) {
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{"at-exit"}, {"unwinding"}, {"at-exit", "c10d"}}) {
    std::vector<std::string> args{"--nproc-per-node", "2", kPeerFailure, "raise", "1", "1500"};
    args.insert(args.end(), how.begin(), how.end());
    const Result r = run(args);
    const std::string summary = failure_summary(r.err);
    SCOPED_TRACE(how.size() == 1 ? how[0] : how[0] + " " + how[1]);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(contains(summary, "root cause (first failure): rank 1 (local rank 1) on host ")) << r.err;
    EXPECT_TRUE(contains(summary, "  error:      boom\n")) << r.err;
    EXPECT_EQ(occurrences(summary, "boom"), 1) << r.err;
    EXPECT_TRUE(contains(summary, "    rankwise: rank 1: uncaught exception: (the error above)\n"))
        << r.err;
    EXPECT_TRUE(contains(summary, "    rank 0 (pid ")) << r.err;
    EXPECT_TRUE(contains(summary, " after a secondary error (a peer exited or closed the connection)\n"))
        << r.err;
    // The workers' own lines still went through, tagged, before the summary.
    EXPECT_TRUE(contains(r.err, "[rank1]: rankwise: rank 1: uncaught exception: boom\n")) << r.err;
    EXPECT_TRUE(contains(r.err, "[rank0]: rankwise: rank 0: uncaught exception: ")) << r.err;
  }
}

// The reverse order: rank 0 raises and exits at once, rank 1 then fails on
// the closed connection.
TEST(LaunchRun, RootCauseIsTheRankThatRaisedAndExitedFirst) {
  const Result r = run({"--nproc-per-node", "2", kPeerFailure, "raise", "0", "0", "at-exit"});
  const std::string summary = failure_summary(r.err);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(summary, "root cause (first failure): rank 0 (local rank 0) on host ")) << r.err;
  EXPECT_TRUE(contains(summary, "  error:      boom\n")) << r.err;
  EXPECT_EQ(occurrences(summary, "boom"), 1) << r.err;
  EXPECT_TRUE(contains(summary, "    rank 1 (pid ")) << r.err;
  EXPECT_TRUE(contains(summary, " after a secondary error (a peer exited or closed the connection)\n"))
      << r.err;
}

// A rank killed by a signal writes no error file; it is still the root cause,
// ahead of the peer's secondary error, also when that peer failed first (the
// killed rank had shut its process group down and was slow to die).
TEST(LaunchRun, KilledRankWithoutErrorFileIsTheRootCauseBeforeAPeersSecondaryError) {
  for (const char* slow_ms : {"0", "1500"}) {
    SCOPED_TRACE(slow_ms);
    const Result r = run({"--nproc-per-node", "2", kPeerFailure, "kill", "1", slow_ms});
    const std::string summary = failure_summary(r.err);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(contains(summary, "root cause (first failure): rank 1 (local rank 1) on host "))
        << r.err;
    EXPECT_TRUE(contains(summary, " was killed by SIGKILL (signal 9)\n")) << r.err;
    EXPECT_TRUE(contains(summary, "  signal:     SIGKILL (9)\n")) << r.err;
    EXPECT_FALSE(contains(summary, "  error:")) << r.err;
    EXPECT_TRUE(contains(summary, "    rank 0 (pid ")) << r.err;
    if (std::string(slow_ms) != "0") {  // else rank 0 may be stopped before it fails
      EXPECT_TRUE(contains(summary, "    rank 0 (pid ") &&
                  contains(summary, "): failed: exited with code 1 after a secondary error"))
          << r.err;
    }
  }
}

TEST(LaunchRun, TwoNodesRendezvousOverTheStore) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const std::vector<std::string> common = {"--nnodes", "2", "--nproc-per-node", "2",
                                           "--master-addr", "127.0.0.1", "--master-port",
                                           std::to_string(port), "--rendezvous-timeout", "60"};
  auto args = [&](int node) {
    std::vector<std::string> a = common;
    a.insert(a.end(), {"--node-rank", std::to_string(node), kProbe, "env"});
    return a;
  };
  Launcher node1(args(1));  // starts first: it waits for node 0's store
  Launcher node0(args(0));
  const Result r1 = node1.wait(), r0 = node0.wait();
  ASSERT_EQ(r0.code, 0) << r0.err;
  ASSERT_EQ(r1.code, 0) << r1.err;
  for (int rank = 0; rank < 4; ++rank) {
    const Result& r = rank < 2 ? r0 : r1;
    const std::string t = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_TRUE(contains(r.out, t + "RANK=" + std::to_string(rank) + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, t + "LOCAL_RANK=" + std::to_string(rank % 2) + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, t + "WORLD_SIZE=4\n")) << r.out;
    EXPECT_TRUE(contains(r.out, t + "GROUP_RANK=" + std::to_string(rank / 2) + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, t + "MASTER_PORT=" + std::to_string(port) + "\n")) << r.out;
  }
}

/// The "probe rank ..." lines of torch_world_probe in `outputs`, without
/// their tags, sorted.
std::vector<std::string> probe_lines(const std::vector<std::string>& outputs) {
  std::vector<std::string> lines;
  for (const std::string& out : outputs) {
    for (const std::string& line : split_lines(out)) {
      const auto at = line.find("probe rank ");
      if (at != std::string::npos) lines.push_back(line.substr(at));
    }
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

TEST(LaunchRun, TorchrunSlurmLineGivesTheSameJobAsMasterAddrAndPort) {
  const std::string probe = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_world_probe";
  // The static rendezvous of the other tests: --node-rank, --master-addr/--master-port.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  auto fixed = [&](int node) {
    return std::vector<std::string>{"--nnodes", "2", "--nproc-per-node", "2", "--node-rank",
                                    std::to_string(node), "--master-addr", "127.0.0.1",
                                    "--master-port", std::to_string(port), probe};
  };
  Launcher f0(fixed(0)), f1(fixed(1));
  const Result rf0 = f0.wait(), rf1 = f1.wait();
  ASSERT_EQ(rf0.code, 0) << rf0.err;
  ASSERT_EQ(rf1.code, 0) << rf1.err;
  // torchrun's line, unchanged: the same on both nodes, no --node-rank.
  const int rdzv_port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const std::vector<std::string> slurm = {
      "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-id", "J", "--rdzv-backend", "c10d",
      "--rdzv-endpoint", "127.0.0.1:" + std::to_string(rdzv_port), probe};
  Launcher s0(slurm), s1(slurm);
  const Result rs0 = s0.wait(), rs1 = s1.wait();
  ASSERT_EQ(rs0.code, 0) << rs0.err;
  ASSERT_EQ(rs1.code, 0) << rs1.err;
  std::vector<std::string> expected;
  for (int rank = 0; rank < 4; ++rank) {
    expected.push_back("probe rank " + std::to_string(rank) + " local_rank " +
                       std::to_string(rank % 2) + " node " + std::to_string(rank / 2) +
                       " world 4 sum 6");
  }
  EXPECT_EQ(probe_lines({rf0.out, rf1.out}), expected);
  EXPECT_EQ(probe_lines({rs0.out, rs1.out}), expected);
  // Each launcher ran one node's ranks (which one is node 0 is the race's).
  EXPECT_EQ(probe_lines({rs0.out}).size(), 2u) << rs0.out;
  EXPECT_EQ(probe_lines({rs1.out}).size(), 2u) << rs1.out;
}

TEST(LaunchRun, RdzvEndpointTakesAnIpv6AddressInBrackets) {
  if (!rankwise::launch::rendezvous::can_listen_on("::1", 0)) GTEST_SKIP() << "no IPv6 loopback (::1) here";
  const int port = rankwise::launch::rendezvous::find_free_port("::1");
  const std::vector<std::string> line = {"--nnodes", "2", "--rdzv-backend", "c10d",
                                         "--rdzv-endpoint", "[::1]:" + std::to_string(port),
                                         "--rendezvous-timeout", "60", kProbe, "env"};
  Launcher a(line), b(line);
  const Result ra = a.wait(), rb = b.wait();
  ASSERT_EQ(ra.code, 0) << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.err;
  const std::string both = ra.out + rb.out;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string t = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_TRUE(contains(both, t + "MASTER_ADDR=::1\n")) << both;
    EXPECT_TRUE(contains(both, t + "GROUP_RANK=" + std::to_string(rank) + "\n")) << both;
  }
}

TEST(LaunchRun, ANodeRankGivenTwiceIsNamed) {
  // --node-rank 1 on two nodes of a 3-node job: the second is refused at
  // once, naming the launcher that holds it. Before: both node-rank-1
  // launchers failed with "Connection reset by peer" and node 0 reported
  // node 2 missing at the timeout.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  auto node = [&](const std::string& rank) {
    return std::vector<std::string>{"--nnodes", "3", "--node-rank", rank, "--master-port",
                                    std::to_string(port), "--rendezvous-timeout", "30",
                                    "/bin/sleep", "30"};
  };
  Launcher first(node("0"));
  ASSERT_TRUE(wait_for_listener(port));
  Launcher second(node("1"));
  store_client(port).wait({"rankwise/nodes/1"}, std::chrono::seconds(30));  // it claimed node rank 1
  const Result twice = run(node("1"));
  EXPECT_EQ(twice.code, 2) << twice.err;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  EXPECT_TRUE(contains(twice.err, "rankwise-run: error: rendezvous: node rank 1 is already taken "
                                  "by the launcher on " + std::string(name) + " (pid " +
                                  std::to_string(second.pid()) + "); give every node its own "
                                  "--node-rank in [0, 3)"))
      << twice.err;
}

TEST(LaunchRun, StorePortInUseIsNamedWithWhatToDo) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const int taken = rankwise::launch::rendezvous::listening_socket("127.0.0.1", port);
  const Result r = run({"--master-port", std::to_string(port), kProbe, "echo"});
  ::close(taken);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, fmt::format("rankwise-run: error: cannot host the rendezvous store "
                                          "at 127.0.0.1:{}: the port is in use (Address already "
                                          "in use); choose another --master-port",
                                          port)))
      << r.err;
}

TEST(LaunchRun, NodeOfAnotherJobOrCountIsRefusedNamingBothAndTheJobGoesOn) {
  TempDir dir;
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  auto node = [&](const std::string& id, const std::string& nnodes = "2") {
    // Each worker notes that it started, then prints its environment.
    return std::vector<std::string>{
        "--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
        "127.0.0.1:" + std::to_string(port), "--rdzv-id", id, "--rendezvous-timeout", "60",
        "/bin/sh", "-c", "echo > " + dir.path() + "/started_$RANK && exec " + kProbe + " env"};
  };
  Launcher first(node("J"));  // hosts job J's store: node 0
  ASSERT_TRUE(wait_for_listener(port));
  // A node of job J2 sent to J's endpoint, and one of J with another job key.
  const Result other = run(node("J2"));
  EXPECT_EQ(other.code, 2) << other.err;
  EXPECT_TRUE(contains(other.err, "rankwise-run: error: this node's --rdzv-id 'J2' differs from "
                                  "node 0's 'J' at 127.0.0.1:" + std::to_string(port)))
      << other.err;
  const Result keyed = run(node("J"), {{"RANKWISE_JOB_KEY", "another-secret"}});
  EXPECT_EQ(keyed.code, 2) << keyed.err;
  EXPECT_TRUE(contains(keyed.err, "RANKWISE_JOB_KEY differs from node 0's")) << keyed.err;
  EXPECT_TRUE(contains(keyed.err, "on this node, none on node 0")) << keyed.err;
  EXPECT_FALSE(contains(keyed.err, "another-secret")) << keyed.err;
  // Before: a node of J that counted 3 nodes took node rank 1 and waited for
  // a third node while node 0 started its worker and hung.
  const Result counted = run(node("J", "3"));
  EXPECT_EQ(counted.code, 2) << counted.err;
  EXPECT_TRUE(contains(counted.err, "this node's --nnodes 3 --nproc-per-node 1 differ from node "
                                    "0's --nnodes 2 --nproc-per-node 1"))
      << counted.err;
  // None of them joined J (nor took its node rank 1): node 0 still waits for
  // its node 1. They have exited, so what they registered is in the store.
  EXPECT_FALSE(store_client(port).check({"rankwise/nodes/1"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "started_0"));
  Launcher second(node("J"));
  const Result r0 = first.wait(), r1 = second.wait();
  ASSERT_EQ(r0.code, 0) << r0.err;
  ASSERT_EQ(r1.code, 0) << r1.err;
  for (int rank = 0; rank < 2; ++rank) {
    const Result& r = rank == 0 ? r0 : r1;
    const std::string t = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_TRUE(contains(r.out, t + "RANK=" + std::to_string(rank) + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, t + "WORLD_SIZE=2\n")) << r.out;
    EXPECT_TRUE(contains(r.out, t + "TORCHELASTIC_RUN_ID=J\n")) << r.out;
  }
}

TEST(LaunchRun, TeeWithLocalRanksFilterShowsRankZeroAndLogsEveryRank) {
  TempDir dir;
  const std::string logs = dir / "D";
  const Result r = run({"--nproc-per-node", "2", "--tee", "3", "--local-ranks-filter", "0",
                        "--log-dir", logs, kProbe, "split"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank0]: out 0\n");
  EXPECT_EQ(r.err, "[rank0]: err 0\n");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string base = logs + "/attempt_0/rank_" + std::to_string(rank);
    EXPECT_EQ(read_file(base + ".stdout"), "out " + std::to_string(rank) + "\n");
    EXPECT_EQ(read_file(base + ".stderr"), "err " + std::to_string(rank) + "\n");
  }
}

TEST(LaunchRun, RedirectsWithoutLogDirWriteATemporaryOne) {
  TempDir tmp;
  // Local rank 0: stdout to the file only; local rank 1: both streams.
  const Result r = run({"--nproc-per-node", "2", "--redirects", "0:1,1:3", kProbe, "split"},
                       {{"TMPDIR", tmp.path()}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  std::string logs;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
    if (e.path().filename().string().rfind("rankwise-logs-", 0) == 0) logs = e.path();
  }
  ASSERT_FALSE(logs.empty());
  EXPECT_EQ(r.err, "rankwise-run: --redirects/--tee without --log-dir: every rank's output goes "
                   "to " + logs + " (give --log-dir to choose)\n[rank0]: err 0\n");
  EXPECT_EQ(read_file(logs + "/attempt_0/rank_0.stdout"), "out 0\n");
  EXPECT_EQ(read_file(logs + "/attempt_0/rank_1.stderr"), "err 1\n");
}

TEST(LaunchRun, MissingNodeIsNamedAfterTheRendezvousTimeout) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const Result r = run({"--nnodes", "3", "--node-rank", "0", "--master-port", std::to_string(port),
                        "--rendezvous-timeout", "1", kProbe, "env"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_TRUE(contains(r.err, "node rank(s) 1, 2 of 3 never arrived")) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace

TEST(LaunchRun, TemporaryDirectoryOfAKilledLauncherIsRemovedByTheNextOne) {
  // TMPDIR is private to this test: it holds what a SIGKILLed launcher leaves
  // (rankwise-run-<pid>-XXXXXX of a pid that no longer exists) and a
  // directory of a live launcher (this test's own pid), which must stay.
  TempDir tmp;
  pid_t dead = ::fork();
  if (dead == 0) _exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = tmp / ("rankwise-run-" + std::to_string(dead) + "-AbCdEf");
  const std::string live = tmp / ("rankwise-run-" + std::to_string(::getpid()) + "-GhIjKl");
  std::filesystem::create_directories(stale);
  std::filesystem::create_directories(live);
  const Result r = run({"--nproc-per-node", "2", kProbe, "spam", "1", "20"}, {{"TMPDIR", tmp.path()}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  // And the launcher removed its own directory at exit.
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) left.push_back(e.path().filename());
  EXPECT_EQ(left, (std::vector<std::string>{std::filesystem::path(live).filename().string()}));
}

TEST(LaunchRun, WorkersFailingAtStartAreReportedNotMistakenForASignalToTheLauncher) {
  // Workers that exit at once: the launcher stops the others while some are
  // between fork and exec. Those must die of the SIGTERM, not pass it to the
  // launcher's own signal handler (which made it exit 143 with no summary).
  for (int attempt = 0; attempt < 8; ++attempt) {
    const Result r = run({"--nproc-per-node", "4", "/bin/sh", "-c", "exit 3"});
    ASSERT_EQ(r.code, 1) << "attempt " << attempt << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "root cause (first failure)")) << r.err;
    EXPECT_FALSE(contains(r.err, "received SIGTERM")) << r.err;
  }
}
