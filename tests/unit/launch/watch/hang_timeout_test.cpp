// rankwise-run --hang-timeout: with a long collective timeout (60 s), the
// launcher itself sees that no rank can make progress, prints each rank's
// state, last collective and stacks, and ends the job within the hang timeout
// plus a margin; a rank working alone outside collectives is never a hang.
#include <gtest/gtest.h>

#include <signal.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/launcher.h"

namespace {

using namespace rankwise::test;
const std::string kCases = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_hang_cases";

// Startup (rendezvous, libtorch), the stack dumps (at most 3 s) and teardown
// (SIGTERM, 1 s grace) on a slow 2-core machine.
constexpr double kMargin = 10.0;

Result run_case(const std::string& hang_timeout, const std::string& mode,
                const std::vector<std::string>& more_flags = {}) {
  std::vector<std::string> args{"--nproc-per-node", "2", "--grace-period", "1", "--hang-timeout",
                                hang_timeout};
  args.insert(args.end(), more_flags.begin(), more_flags.end());
  args.push_back(kCases);
  args.push_back(mode);
  return run(args, {{"HANG_CASE_TIMEOUT_S", "60"}});
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string site(const Result& r) {
  std::smatch m;
  if (!std::regex_search(r.out, m, std::regex("site (\\d+)"))) return "?";
  return "torch_hang_cases.cpp:" + m[1].str();
}

bool process_exists(const std::string& pid) { return ::kill(std::stoi(pid), 0) == 0; }

TEST(HangTimeout, StoppedRankIsReportedWithItsLastCollectiveAndTheJobEnds) {
  const Result r = run_case("2", "sigstop");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_GE(r.seconds, 2.0);
  EXPECT_LT(r.seconds, 2.0 + kMargin) << r.err;  // not the 60 s collective timeout
  const std::string at = site(r);
  EXPECT_TRUE(has(r.err, "rankwise-run: hang: no rank can make progress (for 2 s every rank was "
                         "blocked with no collective completed, or a rank was stopped"))
      << r.err;
  std::smatch m0, m1;
  ASSERT_TRUE(std::regex_search(
      r.err, m0, std::regex("rank 0 \\(pid (\\d+) on [^,]+, waiting in a collective\\): last in "
                            "all_reduce #6 \\(Float \\[2\\], sum\\) at " + at + " \\(entered")))
      << r.err;
  // "stopped" comes from /proc; whether its heartbeat is already older than
  // 2.5 s when the report is printed (2-3 s after the stop) varies.
  ASSERT_TRUE(std::regex_search(
      r.err, m1, std::regex("rank 1 \\(pid (\\d+) on [^,]+, stopped\\): last in all_reduce #5 "
                            "\\(Float \\[2\\], sum\\) at " + at + " \\(completed [0-9.]+ s ago\\)")))
      << r.err;
  EXPECT_TRUE(has(r.err, "rankwise-run: rank 1 held the others up\n")) << r.err;
  // Rank 0's stacks: its main thread waits in rankwise's all_reduce; every
  // thread is listed, symbols demangled.
  EXPECT_TRUE(has(r.err, "rankwise-run: stacks of rank 0:")) << r.err;
  EXPECT_TRUE(has(r.err, "rankwise::dist::ProcessGroup::all_reduce(at::Tensor&, rankwise::dist::ReduceOp"))
      << r.err;
  EXPECT_TRUE(has(r.err, "rankwise::diag::CollectiveProgressPublisher::State::run()")) << r.err;
  EXPECT_FALSE(has(r.err, "stacks of rank 1:")) << "a stopped process cannot answer\n" << r.err;
  // The summary names rank 1, stopped, as the root cause; nothing is left.
  EXPECT_TRUE(has(r.err, "root cause (first failure): rank 1 (local rank 1) on host"));
  EXPECT_TRUE(has(r.err, "held the others up in a hang (it was stopped: SIGSTOP or a debugger), "
                         "then was stopped by the launcher"))
      << r.err;
  EXPECT_TRUE(has(r.err, "  hang:       rank 1 held the others up (see the hang report above)"))
      << r.err;
  EXPECT_FALSE(process_exists(m0[1].str()));
  EXPECT_FALSE(process_exists(m1[1].str()));
}

TEST(HangTimeout, RankWaitingForDdpGradientsIsShownInThatAllReduce) {
  // Before: DDP's gradient all_reduces were not in the flight recorder, so
  // rank 0, waiting for them in backward(), was shown in no collective.
  const Result r = run_case("2", "ddp-sigstop");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 2.0 + kMargin) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("rank 0 \\(pid \\d+ on [^,]+, waiting in a collective\\): last in "
                        "all_reduce 'DistributedDataParallel step 6: gradients' #\\d+ \\(Float "
                        "\\[10\\], sum\\) at recorded_group.cpp:\\d+ \\(entered")))
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 1 \\(pid \\d+ on [^,]+, stopped\\)")))
      << r.err;
  EXPECT_TRUE(has(r.err, "rankwise-run: rank 1 held the others up\n")) << r.err;
}

TEST(HangTimeout, RanksInDifferentCollectivesAreADeadlock) {
  const Result r = run_case("2", "op");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 2.0 + kMargin) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 0 \\(pid \\d+ on [^,]+, waiting in a "
                                                  "collective\\): last in all_reduce #2")))
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 1 \\(pid \\d+ on [^,]+, waiting in a "
                                                  "collective\\): last in broadcast #2 \\(Float "
                                                  "\\[2\\], root 0\\)")))
      << r.err;
  EXPECT_TRUE(has(r.err, "every rank waits inside a collective that no other rank completes: a "
                         "deadlock"))
      << r.err;
  EXPECT_TRUE(has(r.err, "stacks of rank 0:")) << r.err;
  EXPECT_TRUE(has(r.err, "stacks of rank 1:")) << r.err;
  EXPECT_TRUE(has(r.err, "rankwise::dist::ProcessGroup::broadcast(")) << r.err;
  // The summary says the same: no single culprit.
  EXPECT_TRUE(has(r.err, "rank 0 (local rank 0) on host")) << r.err;
  EXPECT_TRUE(has(r.err, "was in a deadlock with every other rank (see the hang report), then "
                         "was stopped by the launcher"))
      << r.err;
  EXPECT_FALSE(has(r.err, "held the others up")) << r.err;
}

TEST(HangTimeout, AWrappedProgramIsFoundAndItsWrapperGetsNoSignal) {
  // Each worker is `sh -c 'torch_hang_cases op; echo wrapper-exit $?'`: the
  // stack dump request goes to the rankwise process inside, never to the
  // shell (which would die of SIGUSR2).
  const Result r = run({"--nproc-per-node", "2", "--grace-period", "1", "--hang-timeout", "2",
                        "sh", "-c", kCases + " op; echo wrapper-exit $?"},
                       {{"HANG_CASE_TIMEOUT_S", "60"}});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "stacks of rank 0:")) << r.err;
  EXPECT_TRUE(has(r.err, "stacks of rank 1:")) << r.err;
  EXPECT_FALSE(has(r.err, "wrote no stack dump")) << r.err;
  EXPECT_FALSE(has(r.err, "SIGUSR2")) << r.err;
}

TEST(HangTimeout, WithALogDirTheReportAndStacksAreKept) {
  const std::string dir = testing::TempDir() + "hang_timeout_logs_" + std::to_string(::getpid());
  const Result r = run_case("2", "op", {"--log-dir", dir});
  EXPECT_EQ(r.code, 1) << r.err;
  std::ifstream in(dir + "/attempt_0/hang_report.txt");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(has(text.str(), "rankwise-run: hang: no rank can make progress")) << text.str();
  EXPECT_TRUE(has(text.str(), "stacks of rank 1:")) << text.str();
  std::filesystem::remove_all(dir);
}

TEST(HangTimeout, RankBehindInTheSequenceHeldTheOthersUp) {
  // Rank 1 waits in all_reduce #2 (another shape), rank 0 went on to barrier #3.
  const Result r = run_case("2", "shape");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 2.0 + kMargin) << r.err;
  EXPECT_TRUE(has(r.err, "rankwise-run: rank 1 held the others up\n")) << r.err;
}

TEST(HangTimeout, ARankWorkingAloneOutsideCollectivesIsNotAHang) {
  // Rank 0 works 4 s while rank 1 waits in a barrier: longer than the 1 s
  // hang timeout, but rank 0 is not blocked.
  const Result r = run_case("1", "solo-work");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_GE(r.seconds, 4.0);
  EXPECT_FALSE(has(r.err, "hang")) << r.err;
}

TEST(HangTimeout, ZeroTurnsTheCheckOff) {
  // The same deadlock as above, left to the 3 s collective timeout.
  const Result r = run({"--nproc-per-node", "2", "--grace-period", "1", "--hang-timeout", "0",
                        kCases, "op"},
                       {{"HANG_CASE_TIMEOUT_S", "3"}});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_FALSE(has(r.err, "rankwise-run: hang:")) << r.err;
  EXPECT_TRUE(has(r.err, "failed after a timeout of 3000 ms")) << r.err;
}

TEST(HangTimeout, NegativeOrHugeIsAUsageError) {
  const Result negative = run({"--hang-timeout", "-1", kCases, "op"}, {});
  EXPECT_EQ(negative.code, 2) << negative.err;
  EXPECT_TRUE(has(negative.err, "--hang-timeout -1: must be zero or more seconds")) << negative.err;
  // Would overflow the clocks (and once silently turned the check off).
  const Result huge = run({"--hang-timeout", "1e10", kCases, "op"}, {});
  EXPECT_EQ(huge.code, 2) << huge.err;
  EXPECT_TRUE(has(huge.err, "--hang-timeout 10000000000: too large; the most is 1000000000 seconds"))
      << huge.err;
}

}  // namespace
