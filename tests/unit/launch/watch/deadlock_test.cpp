// The mistakes users make in a Fabric loop, at default launcher and Fabric
// options (tests/programs/torch_fabric_mistakes.cpp): a collective inside
// `if (fabric.rank() == 0)` is reported by the default deadlock check
// (--deadlock-timeout 10), naming the rank that entered it alone, its call
// site and what the others wait in, long before the 300 s collective timeout;
// a long step that makes progress is not; a rank that leaves early is the
// root cause of its peers' failures.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/launcher.h"
#include "support/workers.h"

namespace {

using namespace rankwise::test;
const std::string kMistakes = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_fabric_mistakes";

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string site(const Result& r, int nth) {
  std::smatch m;
  std::string out = r.out;
  for (int i = 0; i <= nth; ++i) {
    if (!std::regex_search(out, m, std::regex("site (\\d+)"))) return "?";
    if (i < nth) out = m.suffix();
  }
  return "torch_fabric_mistakes.cpp:" + m[1].str();
}

// Rank 0 calls `what` alone at `when`; the job of `nproc` ranks reports the
// deadlock after `timeout_s` (0: the default check, 10 s, is the one that
// fires; others pass --deadlock-timeout, to keep the suite short) and ends
// with code 1.
void expect_named(const std::string& what, const std::string& when, int nproc,
                  const std::string& collective, int timeout_s = 3) {
  std::vector<std::string> args{"--nproc-per-node", std::to_string(nproc)};
  if (timeout_s > 0) args.insert(args.end(), {"--deadlock-timeout", std::to_string(timeout_s)});
  args.insert(args.end(), {kMistakes, what, when});
  const Result r = run(args);
  EXPECT_EQ(r.code, 1) << r.err;
  // The check fired, not a collective timeout (300 s).
  EXPECT_TRUE(has(r.err, "rankwise-run: deadlock: every rank waits in a collective, not all in "
                         "the same one, and none completed a collective for " +
                             std::to_string(timeout_s > 0 ? timeout_s : 10) +
                             " s (--deadlock-timeout):"))
      << r.err;
  const std::string others = nproc == 2 ? "rank 1" : "ranks 1, 2";
  const std::regex alone("rankwise-run: rank 0 entered " + collective + " #\\d+[^\\n]* at " +
                         site(r, 1) + " alone, while " + others +
                         " waited in all_reduce 'DistributedDataParallel step \\d+: [a-z ]+' "
                         "#\\d+ \\(Long \\[1\\], sum\\) at " + site(r, 0) + "; the others never "
                         "entered it\\.");
  EXPECT_TRUE(std::regex_search(r.err, alone)) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("root cause \\(first failure\\): rank 0 \\(local rank 0\\) on host [^ ]+ "
                        "\\(node 0\\) entered a collective alone in a deadlock")))
      << r.err;
  EXPECT_TRUE(has(r.err, "  hang:       a deadlock: rank 0 entered " + collective)) << r.err;
}

TEST(Deadlock, BarrierOnRankZeroMidEpochAtTheDefaults) {
  expect_named("barrier", "mid", 2, "barrier", 0);
}
TEST(Deadlock, MetricAllReduceOnRankZeroMidEpoch) {
  expect_named("all-reduce", "mid", 2, "all_reduce");
}
// Inside rankwise (the metrics' state sync), the report names the user's
// compute() call.
TEST(Deadlock, MetricCollectionComputeOnRankZeroNamesTheCaller) {
  expect_named("metrics", "mid", 2, "all_reduce");
}
TEST(Deadlock, BroadcastOnRankZeroMidEpoch) { expect_named("broadcast", "mid", 2, "broadcast"); }
TEST(Deadlock, BarrierOnRankZeroAtEpochEnd) { expect_named("barrier", "end", 2, "barrier"); }
TEST(Deadlock, MetricAllReduceOnRankZeroAtEpochEnd) {
  expect_named("all-reduce", "end", 2, "all_reduce");
}
TEST(Deadlock, BroadcastOnRankZeroAtEpochEnd) { expect_named("broadcast", "end", 2, "broadcast"); }
TEST(Deadlock, BarrierOnRankZeroAtEpochEndOfThreeRanks) {
  expect_named("barrier", "end", 3, "barrier");
}
TEST(Deadlock, MetricAllReduceOnRankZeroMidEpochOfThreeRanks) {
  expect_named("all-reduce", "mid", 3, "all_reduce");
}
TEST(Deadlock, BroadcastOnRankZeroMidEpochOfThreeRanks) {
  expect_named("broadcast", "mid", 3, "broadcast");
}

TEST(Deadlock, ALongStepThatProgressesIsNone) {
  // Rank 1 computes 6 s in one step while rank 0 waits for it in DDP's
  // all_reduce: three times a 2 s window, and the job still succeeds.
  const Result r =
      run({"--nproc-per-node", "2", "--deadlock-timeout", "2", kMistakes, "slow", "6"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank0]: done")) << r.out;
  EXPECT_FALSE(has(r.err, "deadlock")) << r.err;
}

// Rank 0 stops early (`mode`); the others fail on the closed connection.
void expect_left_early(const std::string& mode, int nproc, const std::string& step) {
  const Result r = run({"--nproc-per-node", std::to_string(nproc), kMistakes, mode});
  EXPECT_EQ(r.code, 1) << r.err;
  const std::string others = nproc == 2 ? "rank 1 was" : "ranks 1, 2 were";
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("root cause \\(first failure\\): rank 0 \\(local rank 0\\) on host [^ ]+ "
                        "\\(node 0\\) ended with exit code 0 \\(returned from main or called "
                        "exit\\) at step " + step + ", while " + others +
                        " in all_reduce 'DistributedDataParallel step \\d+: [a-z ]+' #\\d+ "
                        "[^\\n]* at [a-z_]+\\.cpp:\\d+: it left while they still needed it\\n")))
      << r.err;
  EXPECT_TRUE(has(r.err, "  note:       it ended while the other ranks still needed it")) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 1 \\(pid \\d+\\): [^\\n]* after a "
                                                  "secondary error")))
      << r.err;
}

TEST(EarlyExit, BreakingOutOfEpochsIsTheRootCause) { expect_left_early("break", 2, "8"); }
TEST(EarlyExit, BreakingOutOfEpochsIsTheRootCauseOfThreeRanks) {
  expect_left_early("break", 3, "8");
}
TEST(EarlyExit, ReturningFromMainIsTheRootCause) { expect_left_early("return", 3, "3"); }
TEST(EarlyExit, CallingExitIsTheRootCause) { expect_left_early("exit", 2, "3"); }

}  // namespace

// rank_zero_first: rank 0's block throws; the others, waiting for it, fail
// at once with a secondary error, and rank 0's error is the root cause.
TEST(RankZeroFirst, ABlockThatThrowsOnRankZeroIsTheRootCause) {
  const Result r = run({"--nproc-per-node", "3", kMistakes, "first-throws"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("root cause \\(first failure\\): rank 0 \\(local rank 0\\)")))
      << r.err;
  EXPECT_TRUE(has(r.err, "the download failed: no network")) << r.err;
  EXPECT_FALSE(has(r.err, "deadlock")) << r.err;
}

// rank_zero_first: rank 0's block outlasts the others' wait; they say that a
// block took too long, not that a barrier sits in a branch.
TEST(RankZeroFirst, ABlockThatOutlastsTheTimeoutIsNamed) {
  const Result r = run({"--nproc-per-node", "2", kMistakes, "first-slow"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "Fabric::rank_zero_first: rank 0 did not finish its block within 500 ms"))
      << r.err;
  EXPECT_FALSE(has(r.err, "inside a branch")) << r.err;
}

// Another batch size on one rank: refused at the first training pass, naming
// which ranks have which, instead of a deadlock report 10 s later.
TEST(LoaderMismatch, AnotherBatchSizeOnOneRankIsNamedAtTheFirstPass) {
  const Result r = run({"--nproc-per-node", "3", kMistakes, "batch-size"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "the training loaders differ between ranks (Fabric::setup_dataloader): "
                         "dataset size 48 on ranks 0, 1, 2; batch size 2 on ranks 0, 1; 4 on rank 2"))
      << r.err;
  EXPECT_FALSE(has(r.err, "deadlock")) << r.err;
}

// A preemption whose save fails (a full disk) is that error, in the
// launcher's failure summary, not a silent SIGTERM death (exit 143 and only
// "stopped every worker").
TEST(Preemption, ASaveThatFailsAfterSigtermIsReported) {
  const std::string dir = fresh_dir("deadlock", "preempt_save_fails").string();
  const Result r = run({"--nproc-per-node", "2", kMistakes, "preempted", dir},
                       {{"RANKWISE_CHECKPOINT_FAULT", "fail_at=before-fsync"}});
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(has(r.err, "rankwise-run: stopped every worker after SIGTERM")) << r.err;
  EXPECT_TRUE(has(r.err, "SIGTERM: this rank saves a checkpoint")) << r.err;
  EXPECT_TRUE(has(r.err, "an injected I/O error at before-fsync")) << r.err;
  // Every rank raises the save's error; rank 0's, which wrote, is the root cause.
  EXPECT_TRUE(std::regex_search(r.err, std::regex("root cause \\(first failure\\): rank 0 [^\\n]*\\n"
                                                  "(.*\\n)*  error: +rankwise: RANKWISE_CHECKPOINT_FAULT")))
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/latest")) << r.err;
}
