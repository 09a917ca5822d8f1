// The launcher's choice of the root cause of a failed attempt, in process:
// error files as run_main writes them, the ranking of failures, and the
// summary that shows the root cause's message once. (tests/unit/
// test_launch_run.cpp drives the same through the real launcher.)
#include <gtest/gtest.h>

#include <gloo/common/error.h>

#include <c10/util/Exception.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch/error_file.h"
#include "launch/root_cause.h"
#include "launch/summary.h"
#include "rankwise/error.h"
#include "rankwise/run_main.h"

namespace rankwise::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string wall_ns_ago(milliseconds ago) {
  const auto t = std::chrono::system_clock::now() - ago;
  return std::to_string(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

TEST(LaunchErrorFile, ParsesRunMainsRecordWithItsTime) {
  const auto written = Clock::now() - std::chrono::hours(1);
  const WorkerError e = parse_worker_error(
      R"({"message":"boom\nsecond line","rank":3,"secondary":true,"timestamp":1,"timestamp_ns":)" +
          wall_ns_ago(milliseconds(2000)) + "}\n",
      written);
  EXPECT_EQ(e.message, "boom\nsecond line");
  EXPECT_TRUE(e.secondary);
  EXPECT_EQ(e.rank, 3);
  // timestamp_ns wins over timestamp and the file's time; 2 s ago, give or take.
  EXPECT_NEAR(seconds(Clock::now() - e.time), 2.0, 0.5);
}

TEST(LaunchErrorFile, FallsBackToSecondsThenToTheFilesTime) {
  const auto written = Clock::now() - milliseconds(500);
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const WorkerError s = parse_worker_error(
      R"({"message":"a","timestamp":)" + std::to_string(now_s - 100) + "}", written);
  EXPECT_FALSE(s.secondary);
  EXPECT_FALSE(s.rank.has_value());
  EXPECT_NEAR(seconds(Clock::now() - s.time), 100.0, 1.5);  // whole seconds

  // torchelastic's layout: the message and a timestamp string inside "message".
  const WorkerError t = parse_worker_error(
      R"({"message":{"message":"RuntimeError: x","extraInfo":{"py_callstack":"...","timestamp":")" +
          std::to_string(now_s - 50) + R"("}}})",
      written);
  EXPECT_EQ(t.message, "RuntimeError: x");
  EXPECT_NEAR(seconds(Clock::now() - t.time), 50.0, 1.5);

  for (const std::string& text : {std::string("plain text\n"), std::string("{\"no\": \"message\"}"),
                                  std::string("{\"message\": 3}"), std::string("{broken")}) {
    const WorkerError p = parse_worker_error(text, written);
    EXPECT_EQ(p.message, text == "plain text\n" ? "plain text" : text) << text;
    EXPECT_FALSE(p.secondary) << text;
    EXPECT_EQ(p.time, written) << text;
  }
}

TEST(LaunchErrorFile, ReadsWhatRecordErrorWrites) {
  char templ[] = "/tmp/rankwise-errfile-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string path = std::string(templ) + "/error.json";
  EXPECT_FALSE(read_worker_error(path).has_value());
  ::setenv("RANKWISE_ERROR_FILE", path.c_str(), 1);
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  const auto before = Clock::now();
  ASSERT_TRUE(record_error("rankwise: rank 1/2: barrier failed", /*secondary=*/true));
  const auto after = Clock::now();
  ::unsetenv("RANKWISE_ERROR_FILE");
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  const auto e = read_worker_error(path);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->path, path);
  EXPECT_EQ(e->message, "rankwise: rank 1/2: barrier failed");
  EXPECT_TRUE(e->secondary);
  EXPECT_EQ(e->rank, 1);
  // Converted between the clocks: within the call, give or take 1 s (the
  // conversion reads both clocks, and a loaded 2-core machine can stall a
  // thread between the two reads for tens of ms; a wrong conversion is off
  // by hours or years).
  EXPECT_GT(e->time, before - milliseconds(1000));
  EXPECT_LT(e->time, after + milliseconds(1000));
  std::remove(path.c_str());
  ::rmdir(templ);
}

TEST(LaunchErrorFile, PeerGoneIsRankwisesPeerErrorOrGloosIoException) {
  EXPECT_TRUE(is_peer_gone(PeerError("rankwise: rank 0/2: barrier failed: a peer rank probably exited")));
  // Other rankwise errors by their type, whatever they quote.
  EXPECT_FALSE(is_peer_gone(Error("rankwise: DistributedDataParallel: Connection closed by peer")));
  EXPECT_FALSE(is_peer_gone(TimeoutError("rankwise: rank 0/2: barrier failed after a timeout")));
  // Raw c10d/Gloo errors by their type, whatever they say: Gloo's transport
  // error is secondary, Gloo's other errors and libtorch's are not, even with
  // Gloo's words for a closed connection in them.
  EXPECT_TRUE(is_peer_gone(::gloo::IoException("[gloo/transport/tcp/pair.cc:598] something else")));
  EXPECT_FALSE(is_peer_gone(::gloo::Exception("Connection closed by peer [127.0.0.1]:33498")));
  EXPECT_FALSE(is_peer_gone(std::runtime_error(
      "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:33498")));
  EXPECT_FALSE(is_peer_gone(c10::Error({__func__, __FILE__, __LINE__},
                                       "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
                                       "Connection closed by peer [10.0.0.2]:4242")));
  EXPECT_FALSE(is_peer_gone(std::runtime_error("boom")));
}

// A worker of an attempt that started at `t0`.
WorkerRecord worker(int rank, WorkerState state, Clock::time_point t0, int end_ms) {
  WorkerRecord w;
  w.rank = rank;
  w.local_rank = rank;
  w.pid = 100 + rank;
  w.state = state;
  w.exit_code = state == WorkerState::kSucceeded ? 0 : 1;
  w.start = t0;
  w.end = t0 + milliseconds(end_ms);
  w.error_file = "/tmp/error_rank" + std::to_string(rank) + ".json";
  return w;
}

WorkerError error(const std::string& message, bool secondary, Clock::time_point at) {
  WorkerError e;
  e.path = "/tmp/error.json";
  e.message = message;
  e.secondary = secondary;
  e.time = at;
  return e;
}

TEST(LaunchRootCause, PrimaryBeforeSecondaryThenEarliest) {
  const auto t0 = Clock::now();
  // Rank 0 failed first, on a closed connection; rank 1 had raised before and
  // was stopped while it was slow to exit.
  std::vector<WorkerRecord> w = {worker(0, WorkerState::kFailed, t0, 100),
                                 worker(1, WorkerState::kTerminated, t0, 300)};
  w[0].error = error("peer gone", true, t0 + milliseconds(90));
  w[1].error = error("boom", false, t0 + milliseconds(50));
  w[1].stop_time = t0 + milliseconds(110);
  EXPECT_EQ(pick_root_cause(w), 1u);
  // Secondary loses even when the primary came later (written while unwinding).
  w[1].error->time = t0 + milliseconds(105);
  EXPECT_EQ(pick_root_cause(w), 1u);
  // An error written after the launcher asked it to stop is a consequence.
  w[1].error->time = t0 + milliseconds(120);
  EXPECT_EQ(pick_root_cause(w), 0u);
  // Stopped without an error file: not a candidate.
  w[1].error.reset();
  EXPECT_EQ(pick_root_cause(w), 0u);
}

TEST(LaunchRootCause, WorkersWithoutErrorFileRankByExitTime) {
  const auto t0 = Clock::now();
  std::vector<WorkerRecord> w = {worker(0, WorkerState::kFailed, t0, 100),
                                 worker(1, WorkerState::kFailed, t0, 200),
                                 worker(2, WorkerState::kFailed, t0, 300)};
  w[1].term_signal = 9;  // killed: no error file
  w[0].error = error("peer gone", true, t0 + milliseconds(90));
  w[2].error = error("boom", false, t0 + milliseconds(250));
  EXPECT_EQ(pick_root_cause(w), 1u);  // exited at 200 ms, before the error at 250 ms
  w[2].error->time = t0 + milliseconds(150);
  EXPECT_EQ(pick_root_cause(w), 2u);
  w[2].error->time = t0 + milliseconds(200);
  EXPECT_EQ(pick_root_cause(w), 1u);  // a tie: the lower index
  // Only secondary errors: the earliest.
  w[1].error = error("peer gone", true, t0 + milliseconds(80));
  w[2].error = error("peer gone", true, t0 + milliseconds(70));
  EXPECT_EQ(pick_root_cause(w), 2u);
  // None failed.
  std::vector<WorkerRecord> ok = {worker(0, WorkerState::kSucceeded, t0, 100),
                                  worker(1, WorkerState::kTerminated, t0, 100)};
  EXPECT_FALSE(pick_root_cause(ok).has_value());
}

FailureReport report_for(const std::vector<WorkerRecord>& workers, std::size_t root,
                         std::deque<std::string> tail) {
  FailureReport r;
  r.host = "h";
  r.world_size = static_cast<int>(workers.size());
  r.root_cause = workers[root];
  r.root_stderr_tail = std::move(tail);
  r.workers = workers;
  r.job_start = workers[0].start;
  return r;
}

int occurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

TEST(LaunchSummary, ShowsTheRootCausesMessageOnce) {
  const auto t0 = Clock::now();
  std::vector<WorkerRecord> w = {worker(0, WorkerState::kFailed, t0, 100),
                                 worker(1, WorkerState::kTerminated, t0, 300)};
  w[0].error = error("rankwise: rank 0/2: barrier failed: a peer rank probably exited", true,
                     t0 + milliseconds(90));
  w[1].error = error("boom", false, t0 + milliseconds(50));
  w[1].error->rank = 1;
  w[1].stop_time = t0 + milliseconds(110);
  w[1].term_signal = 15;
  const std::string s = format_failure_summary(
      report_for(w, 1, {"loading data", "rankwise: rank 1: uncaught exception: boom"}));
  EXPECT_EQ(occurrences(s, "boom"), 1) << s;
  EXPECT_NE(s.find("rank 1 (local rank 1) on host h (node 0) reported an error, then was stopped "
                   "by the launcher (SIGTERM)\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  error:      boom\n  error file: /tmp/error.json (written 0.05 s after its "
                   "start)\n  last 2 lines of stderr:\n    loading data\n    rankwise: rank 1: "
                   "uncaught exception: (the error above)\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("    rank 0 (pid 100): failed: exited with code 1 after a secondary error (a "
                   "peer exited or closed the connection)\n"),
            std::string::npos)
      << s;
}

TEST(LaunchSummary, MultiLineMessageOnceEvenWhenTheTailCutsIt) {
  const auto t0 = Clock::now();
  std::vector<WorkerRecord> w = {worker(0, WorkerState::kFailed, t0, 100)};
  w[0].error = error("bad shape\nframe #0: f\nframe #1: g", false, t0 + milliseconds(90));
  // The whole message in the tail, and only its last two lines.
  for (const auto& [tail, shown] :
       {std::pair{std::deque<std::string>{"x", "rankwise: rank 0: uncaught exception: bad shape",
                                          "frame #0: f", "frame #1: g", "y"},
                  std::string("  last 3 lines of stderr:\n    x\n    rankwise: rank 0: uncaught "
                              "exception: (the error above)\n    y\n")},
        std::pair{std::deque<std::string>{"frame #0: f", "frame #1: g"},
                  std::string("  last lines of stderr: the error above\n")}}) {
    const std::string s = format_failure_summary(report_for(w, 0, tail));
    EXPECT_NE(s.find("  error:      bad shape\n              frame #0: f\n              frame #1: "
                     "g\n"),
              std::string::npos)
        << s;
    EXPECT_EQ(occurrences(s, "frame #1: g"), 1) << s;
    EXPECT_NE(s.find(shown), std::string::npos) << s;
  }
}

TEST(LaunchSummary, SecondaryRootCauseSaysTheFirstErrorIsElsewhere) {
  const auto t0 = Clock::now();
  std::vector<WorkerRecord> w = {worker(0, WorkerState::kFailed, t0, 100)};
  w[0].error = error("rankwise: rank 0/4: barrier failed: a peer rank probably exited", true,
                     t0 + milliseconds(90));
  const std::string s = format_failure_summary(report_for(w, 0, {}));
  EXPECT_NE(s.find("  note:       this error only says that a peer exited or closed the "
                   "connection; the first error is on another rank"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  last lines of stderr: (none)\n"), std::string::npos) << s;
}

}  // namespace
}  // namespace rankwise::launch
