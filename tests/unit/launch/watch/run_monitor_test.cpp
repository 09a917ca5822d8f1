// rankwise-run --monitor through the real launcher, on
// tests/programs/torch_monitor_steps (a DDP loop calling
// monitor::record_step): a rank sleeping 50 ms per step is named as the
// straggler, and no other rank; even ranks name none; a rank stopped with
// SIGSTOP is shown as stalled; on a terminal (tmux) the table is redrawn in
// place. Also the table's text (launch/watch/monitor_table.h).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "launch/watch/monitor_table.h"
#include "launch/watch/run_monitor.h"
#include "support/launcher.h"
#include "support/shell.h"

namespace {

using namespace rankwise::test;
const std::string kSteps = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_monitor_steps";

struct Line {
  std::string text;
  double seconds = 0;  // since the launcher started
};

// rankwise-run with stdout and stderr merged into one pipe, read line by
// line as it comes, each line with its arrival time. The destructor kills
// the launcher (SIGKILL: its workers die with it) if it still runs, after
// SIGCONT to the pids the test stopped.
class LiveRun {
 public:
  explicit LiveRun(const std::vector<std::string>& args) {
    std::vector<std::string> argv_strings{kRun};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) std::abort();
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setenv("OMP_NUM_THREADS", "1", 1);
      const int devnull = ::open("/dev/null", O_RDONLY);
      ::dup2(devnull, 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execv(kRun.c_str(), argv.data());
      _exit(127);
    }
    ::close(out[1]);
    fd_ = out[0];
  }
  ~LiveRun() {
    for (pid_t p : stopped_) ::kill(p, SIGCONT);
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  void stop(pid_t pid) {
    stopped_.push_back(pid);
    ::kill(pid, SIGSTOP);
  }
  void resume(pid_t pid) { ::kill(pid, SIGCONT); }

  /// The next line whose text matches `pattern`, waiting at most until
  /// `deadline_s` since the start; every line read is kept in lines().
  std::optional<Line> wait_for(const std::regex& pattern, double deadline_s) {
    for (;;) {
      for (; next_ < lines_.size(); ++next_) {
        if (std::regex_search(lines_[next_].text, pattern)) return lines_[next_++];
      }
      if (!read_some(deadline_s)) return std::nullopt;
    }
  }

  /// Reads to the end; the launcher's exit code (-1 when killed after `deadline_s`).
  int finish(double deadline_s) {
    while (read_some(deadline_s)) {
    }
    if (fd_ >= 0) {  // past the deadline
      ::kill(pid_, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exited_ = true;
    return fd_ < 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::vector<Line>& lines() const { return lines_; }
  std::string all() const {
    std::string text;
    for (const Line& l : lines_) text += l.text + "\n";
    return text;
  }

 private:
  // False at end of file or past the deadline.
  bool read_some(double deadline_s) {
    if (fd_ < 0) return false;
    const double left = deadline_s - since(start_);
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) return true;
    char buf[65536];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) return true;
      ::close(fd_);
      fd_ = -1;
      if (!partial_.empty()) lines_.push_back({partial_, since(start_)});
      return false;
    }
    partial_.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = partial_.find('\n')) != std::string::npos) {
      lines_.push_back({partial_.substr(0, nl), since(start_)});
      partial_.erase(0, nl + 1);
    }
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  Clock::time_point start_;
  std::string partial_;
  std::vector<Line> lines_;
  std::size_t next_ = 0;
  std::vector<pid_t> stopped_;
};

std::vector<std::string> matching(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (std::regex_search(line, re)) out.push_back(line);
  }
  return out;
}

TEST(Monitor, TheRankThatSleepsIsTheOnlyStraggler) {
  LiveRun run({"--nproc-per-node", "3", "--monitor=1", kSteps, "16", "2", "50"});
  const auto first = run.wait_for(std::regex("\\]: step 1$"), 90);
  ASSERT_TRUE(first) << run.all();
  const auto flagged = run.wait_for(std::regex("^rankwise-run: straggler: rank "), first->seconds + 30);
  ASSERT_TRUE(flagged) << run.all();
  EXPECT_TRUE(std::regex_search(
      flagged->text, std::regex("^rankwise-run: straggler: rank 2 \\(host [^)]+\\) computes "
                                "[0-9]+ ms/step, [0-9]+ % over the median [0-9]+ ms, for [0-9]+ s$")))
      << flagged->text;
  const double after = flagged->seconds - first->seconds;
  EXPECT_LT(after, 10.0) << run.all();
  std::printf("straggler named %.1f s after the first step (%.1f s after the launch)\n", after,
              flagged->seconds);
  EXPECT_EQ(run.finish(120), 0) << run.all();
  const std::string all = run.all();
  EXPECT_TRUE(matching(all, "^rankwise-run: straggler: rank [01] ").empty()) << all;
  // The plain tables (not a terminal) show rank 2 as the straggler, and
  // its compute time per step above the sleep.
  const auto rows = matching(all, "^rankwise-run: +2 .* straggler$");
  ASSERT_FALSE(rows.empty()) << all;
  EXPECT_TRUE(matching(all, "^rankwise-run: +[01] .* straggler$").empty()) << all;
  EXPECT_EQ(matching(all, "^rankwise-run: +rank +host +device +step +samples/s +compute ms +wait ms "
                          "+loss +rss +heartbeat +state$").empty(), false) << all;
}

TEST(Monitor, EvenRanksHaveNoStraggler) {
  LiveRun run({"--nproc-per-node", "3", "--monitor=2", kSteps, "12"});
  ASSERT_TRUE(run.wait_for(std::regex("\\]: step 1$"), 90)) << run.all();
  EXPECT_EQ(run.finish(120), 0) << run.all();
  const std::string all = run.all();
  EXPECT_TRUE(matching(all, "straggler: rank").empty()) << all;
  // The tables did show every rank training.
  EXPECT_FALSE(matching(all, "^rankwise-run: +2 +[^ ]+ +cpu +[0-9]+ +[0-9]+ .* running$").empty())
      << all;
}

TEST(Monitor, AStoppedRankIsShownStalledThenRunningAgain) {
  LiveRun run({"--nproc-per-node", "2", "--monitor=1", "--hang-timeout", "120", kSteps, "14"});
  const auto pid_line = run.wait_for(std::regex("\\]: pid 1 [0-9]+$"), 90);
  ASSERT_TRUE(pid_line) << run.all();
  const pid_t pid = std::stoi(pid_line->text.substr(pid_line->text.rfind(' ') + 1));
  const auto first = run.wait_for(std::regex("\\]: step 1$"), 90);
  ASSERT_TRUE(first) << run.all();
  run.wait_for(std::regex("^\\$never"), first->seconds + 2);  // let it train a little
  const double stopped_at = first->seconds + 2;
  run.stop(pid);
  const auto stalled = run.wait_for(std::regex("^rankwise-run: stalled: rank 1 "), stopped_at + 20);
  ASSERT_TRUE(stalled) << run.all();
  EXPECT_LT(stalled->seconds - stopped_at, 10.0);
  std::printf("stalled shown %.1f s after SIGSTOP\n", stalled->seconds - stopped_at);
  EXPECT_NE(stalled->text.find("pid " + std::to_string(pid)), std::string::npos) << stalled->text;
  ASSERT_TRUE(run.wait_for(std::regex("^rankwise-run: +1 .* stalled$"), stalled->seconds + 5))
      << run.all();
  run.resume(pid);
  ASSERT_TRUE(run.wait_for(std::regex("^rankwise-run: stalled: rank 1 is running again after"),
                           stalled->seconds + 20))
      << run.all();
  EXPECT_EQ(run.finish(120), 0) << run.all();
}

TEST(Monitor, TableIsRedrawnInPlaceOnATerminal) {
  if (shell("command -v tmux").empty()) GTEST_SKIP() << "tmux is not installed";
  char templ[] = "/tmp/rankwise-monitor-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string dir = templ, socket = dir + "/tmux", raw = dir + "/raw";
  const std::string tmux = "tmux -S " + socket + " ";
  const std::string command = "OMP_NUM_THREADS=1 " + kRun + " --nproc-per-node 2 --monitor " +
                              kSteps + " 6; echo EXIT=$?; sleep 120";
  shell(tmux + "-f /dev/null new-session -d -x 150 -y 40 '" + command + "'");
  shell(tmux + "pipe-pane -o 'cat >> " + raw + "'");
  std::string screen;
  for (int i = 0; i < 180 && screen.find("EXIT=") == std::string::npos; ++i) {
    ::usleep(500000);
    screen = shell(tmux + "capture-pane -p -S -2000");
  }
  shell(tmux + "kill-server");
  std::ifstream in(raw);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::filesystem::remove_all(dir);
  ASSERT_NE(screen.find("EXIT=0"), std::string::npos) << screen;
  // Drawn several times while it ran...
  const std::string drawn = bytes.str();
  std::size_t draws = 0;
  for (auto at = drawn.find("monitor at"); at != std::string::npos; at = drawn.find("monitor at", at + 1)) {
    ++draws;
  }
  EXPECT_GE(draws, 3u) << screen;
  // ... but on the final screen (and in its scrollback) the table is there
  // once: the last one, printed when the run ended; the workers' lines too.
  EXPECT_EQ(matching(screen, "monitor at").size(), 1u) << screen;
  EXPECT_EQ(matching(screen, "rank +host +device +step").size(), 1u) << screen;
  EXPECT_EQ(matching(screen, "^rankwise-run: +1 .* ended$").size(), 1u) << screen;
  EXPECT_EQ(matching(screen, "^\\[rank0\\]: step 1$").size(), 1u) << screen;
  EXPECT_EQ(matching(screen, "^\\[rank1\\]: pid 1 [0-9]+$").size(), 1u) << screen;
}

// Each table's rows (rank -> step; -1 for "-"), in the order printed, with
// the arrival time of the table's first line.
struct Table {
  double seconds = 0;
  std::map<int, int64_t> steps;
};
std::vector<Table> tables(const std::vector<Line>& lines) {
  const std::regex header("^rankwise-run: monitor at ");
  const std::regex row("^rankwise-run: +([0-9]+) +[^ ]+ +[^ ]+ +([0-9]+|-) ");
  std::vector<Table> out;
  for (const Line& l : lines) {
    std::smatch m;
    if (std::regex_search(l.text, header)) {
      out.push_back({l.seconds, {}});
    } else if (!out.empty() && std::regex_search(l.text, m, row)) {
      out.back().steps[std::stoi(m[1])] = m[2] == "-" ? -1 : std::stoll(m[2]);
    }
  }
  return out;
}

// The table printed when the run ends shows every rank's real step count
// (what the program printed as it returned), not a heartbeat read earlier.
TEST(Monitor, TheLastTableShowsEachRanksRealStepCount) {
  LiveRun run({"--nproc-per-node", "2", "--monitor=1", kSteps, "3"});
  EXPECT_EQ(run.finish(120), 0) << run.all();
  std::map<int, int64_t> real;
  const std::regex done("^\\[rank([01])\\]: steps ([0-9]+)$");
  for (const Line& l : run.lines()) {
    std::smatch m;
    if (std::regex_search(l.text, m, done)) real[std::stoi(m[1])] = std::stoll(m[2]);
  }
  ASSERT_EQ(real.size(), 2u) << run.all();
  const auto all = tables(run.lines());
  ASSERT_FALSE(all.empty()) << run.all();
  EXPECT_EQ(all.back().steps, real) << run.all();
}

// A table shows the steps made before it was due: every step rank 0 printed
// half a second before a table was printed is in that table (the worker
// publishes its step at once, the launcher reads the store when a table is
// due).
TEST(Monitor, EachTableShowsTheStepsAlreadyMade) {
  LiveRun run({"--nproc-per-node", "2", "--monitor=1", kSteps, "6"});
  EXPECT_EQ(run.finish(120), 0) << run.all();
  const std::regex printed("^\\[rank0\\]: step ([0-9]+)$");
  int checked = 0;
  for (const Table& t : tables(run.lines())) {
    int64_t made = -1;  // the last step printed 0.5 s before the table
    for (const Line& l : run.lines()) {
      std::smatch m;
      if (l.seconds <= t.seconds - 0.5 && std::regex_search(l.text, m, printed)) {
        made = std::stoll(m[1]);
      }
    }
    if (made < 0) continue;
    ++checked;
    ASSERT_TRUE(t.steps.count(0)) << run.all();
    EXPECT_GE(t.steps.at(0), made) << "table at " << t.seconds << " s\n" << run.all();
  }
  EXPECT_GE(checked, 3) << run.all();
}

// A rank of another node (not local: the launcher cannot see its process)
// whose heartbeat stops changing is named stalled after the heartbeat
// timeout (2.5 s by the launcher's clock), once, and running again when it
// changes; the lines go to the monitor's stream, the table when due.
TEST(RunMonitor, ARemoteRankWhoseHeartbeatStopsIsStalledOnce) {
  using namespace rankwise::launch;
  using namespace std::chrono_literals;
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK), 0);
  rankwise::launch::watch::MonitorOptions options;
  options.fd = fds[1];
  options.refresh = 60s;
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  std::string text;
  auto drain = [&] {
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  };
  {
    rankwise::launch::watch::RunMonitor monitor(options, t0);
    auto views = [](int64_t heartbeat_ms) {
      std::vector<rankwise::launch::watch::RankView> v(2);
      for (int r = 0; r < 2; ++r) {
        v[r].rank = r;
        v[r].progress.emplace();
        v[r].progress->host = "n" + std::to_string(r);
        v[r].progress->pid = 100 + r;
        v[r].progress->heartbeat_ms = r == 1 ? 5000 : heartbeat_ms;
      }
      return v;
    };
    monitor.observe(views(1000), t0 + 60s);  // the table is due: drawn once
    monitor.observe(views(2000), t0 + 61s);
    monitor.observe(views(3000), t0 + 62s);  // rank 1: 2 s unchanged
    drain();
    EXPECT_EQ(text.find("rankwise-run: stalled:"), std::string::npos) << text;
    monitor.observe(views(4000), t0 + 63s);  // 3 s
    monitor.observe(views(5000), t0 + 64s);
    drain();
    EXPECT_EQ(matching(text, "^rankwise-run: stalled: rank 1 \\(host n1, pid 101\\): heartbeat "
                             "stopped 3\\.0 s ago \\(process stopped").size(), 1u) << text;
    EXPECT_TRUE(matching(text, "stalled: rank 0").empty()) << text;
    auto moving = views(6000);
    moving[1].progress->heartbeat_ms = 6000;
    monitor.observe(moving, t0 + 65s);
    monitor.finish(&moving, t0 + 66s);
  }
  drain();
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(matching(text, "^rankwise-run: stalled: rank 1 is running again after 2 s$").size(), 1u)
      << text;
  EXPECT_EQ(matching(text, "monitor at").size(), 2u) << text;  // the due one and the last one
}

TEST(MonitorTable, ColumnsAreAlignedAndUnknownsAreDashes) {
  using rankwise::launch::watch::MonitorRow;
  MonitorRow a;
  a.rank = 0;
  a.host = "node-a";
  a.device = "cpu";
  a.step = 1200;
  a.samples_per_s = 1234.4;
  a.step_ms = 52.0;
  a.wait_ms = 40.25;
  a.loss = 0.123456;
  a.rss_bytes = 300 * 1048576;
  a.heartbeat_age = std::chrono::milliseconds(400);
  a.state = "running";
  MonitorRow b;  // no record yet
  b.rank = 1;
  b.state = "starting";
  const auto lines = rankwise::launch::watch::format_monitor_table({a, b});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "rank  host    device  step  samples/s  compute ms  wait ms    loss      rss  heartbeat  state");
  EXPECT_EQ(lines[1], "   0  node-a  cpu     1200       1234        11.8     40.2  0.1235  300 MiB      0.4 s  running");
  EXPECT_EQ(lines[2], "   1  -       -          -          -           -        -       -        -          -  starting");
}

}  // namespace
