// The failure summary (launch/workers/summary.h): the root cause's message
// once, and what a secondary root cause says.
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

#include "support/attempt.h"
#include "wire/error_file.h"
#include "launch/workers/root_cause.h"
#include "launch/workers/summary.h"
#include "rankwise/error.h"
#include "rankwise/run_main.h"

namespace rankwise::launch {
using namespace rankwise::launch::rendezvous;
using namespace rankwise::launch::workers;
using namespace rankwise::wire;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using test::error;
using test::worker;

launch::workers::FailureReport report_for(const std::vector<launch::workers::WorkerRecord>& workers, std::size_t root,
                         std::deque<std::string> tail) {
  launch::workers::FailureReport r;
  r.host = "h";
  r.world_size = static_cast<int>(workers.size());
  r.root_cause = workers[root];
  r.root_stderr_tail = std::move(tail);
  r.workers = workers;
  r.job_start = workers[0].start;
  r.error_files_kept = true;  // as with --log-dir: the summary names the file
  return r;
}

int occurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

TEST(LaunchSummary, ShowsTheRootCausesMessageOnce) {
  const auto t0 = Clock::now();
  std::vector<launch::workers::WorkerRecord> w = {worker(0, launch::workers::WorkerState::kFailed, t0, 100),
                                 worker(1, launch::workers::WorkerState::kTerminated, t0, 300)};
  w[0].error = error("rankwise: rank 0/2: barrier failed: a peer rank probably exited", true,
                     t0 + milliseconds(90));
  w[1].error = error("boom", false, t0 + milliseconds(50));
  w[1].error->rank = 1;
  w[1].stop_time = t0 + milliseconds(110);
  w[1].term_signal = 15;
  const std::string s = launch::workers::format_failure_summary(
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
  std::vector<launch::workers::WorkerRecord> w = {worker(0, launch::workers::WorkerState::kFailed, t0, 100)};
  w[0].error = error("bad shape\nframe #0: f\nframe #1: g", false, t0 + milliseconds(90));
  // The whole message in the tail, and only its last two lines.
  for (const auto& [tail, shown] :
       {std::pair{std::deque<std::string>{"x", "rankwise: rank 0: uncaught exception: bad shape",
                                          "frame #0: f", "frame #1: g", "y"},
                  std::string("  last 3 lines of stderr:\n    x\n    rankwise: rank 0: uncaught "
                              "exception: (the error above)\n    y\n")},
        std::pair{std::deque<std::string>{"frame #0: f", "frame #1: g"},
                  std::string("  last lines of stderr: the error above\n")}}) {
    const std::string s = launch::workers::format_failure_summary(report_for(w, 0, tail));
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
  std::vector<launch::workers::WorkerRecord> w = {worker(0, launch::workers::WorkerState::kFailed, t0, 100)};
  w[0].error = error("rankwise: rank 0/4: barrier failed: a peer rank probably exited", true,
                     t0 + milliseconds(90));
  const std::string s = launch::workers::format_failure_summary(report_for(w, 0, {}));
  EXPECT_NE(s.find("  note:       this error only says that a peer exited or closed the "
                   "connection; the first error is on another rank"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  last lines of stderr: (none)\n"), std::string::npos) << s;
}

// A rank that Gloo's size check aborted, without rankwise's own report of it
// (no error file: e.g. a Python program under rankwise-run): the summary
// says what Gloo's text means.
TEST(LaunchSummary, GlooSizeCheckWithoutAnErrorFileIsExplained) {
  const auto t0 = Clock::now();
  std::vector<launch::workers::WorkerRecord> w = {worker(0, launch::workers::WorkerState::kFailed, t0, 100)};
  w[0].term_signal = 6;
  const std::string gloo =
      "  what():  [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:510] "
      "op.preamble.length <= op.nbytes. 1024 vs 12";
  const std::string s = launch::workers::format_failure_summary(
      report_for(w, 0, {"terminate called after throwing an instance of 'gloo::EnforceNotMet'", gloo}));
  EXPECT_NE(s.find("  meaning:    Gloo's size check failed (op.preamble.length <= op.nbytes): the "
                   "ranks sent different sizes to the same collective; give every rank a tensor "
                   "of the same shape and dtype there\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("meaning:"), s.rfind("meaning:")) << "said twice: " << s;
  EXPECT_EQ(launch::workers::format_failure_summary(report_for(w, 0, {"Segmentation fault"}))
                .find("meaning:"),
            std::string::npos);
}

}  // namespace
}  // namespace rankwise::launch
