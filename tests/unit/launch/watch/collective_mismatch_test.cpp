// launch::find_mismatch and HangWatchdog's mismatch window (--deadlock-timeout):
// every rank waiting in collectives that are not all the same one, with none
// entered or completed for the window, is a deadlock; a rank working outside
// collectives (a long step), the same collective everywhere, or any progress
// is not.
#include <gtest/gtest.h>

#include "launch/watch/collective_mismatch.h"

namespace {

using rankwise::launch::watch::CollectiveMismatch;
using rankwise::launch::watch::find_mismatch;
using rankwise::launch::watch::format_mismatch_report;
using rankwise::launch::watch::HangWatchdog;
using rankwise::launch::watch::RankView;
using rankwise::wire::CollectiveProgress;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kNow = 1'000'000'000;  // Unix ms of the observations

// A rank inside collective `entered`, described by `what` (+ " #entered" and
// its details), at step `step`.
RankView waiting(int rank, uint64_t entered, const std::string& what, const std::string& details,
                 int64_t step = 3, int64_t entered_ago_ms = 500) {
  CollectiveProgress p;
  p.entered = entered;
  p.completed = entered - 1;
  p.last = what + " #" + std::to_string(entered) + details;
  p.entered_ms = kNow - entered_ago_ms;
  p.heartbeat_ms = kNow - 100;
  p.pid = 100 + rank;
  p.host = "h";
  p.step = step;
  return {rank, p, true, false, false, false};
}

// Observes `views` at t0 + `ms`, every heartbeat fresh (the ranks are alive).
bool observe(HangWatchdog& w, std::vector<RankView>& views, Clock::time_point t0, int64_t ms) {
  for (auto& v : views) v.progress->heartbeat_ms = kNow + ms;
  return w.observe(views, t0 + milliseconds(ms));
}

RankView barrier(int rank, uint64_t n, int64_t step = 3) {
  return waiting(rank, n, "barrier", " at train.cpp:95", step);
}

RankView gradients(int rank, uint64_t n, int64_t step = 4) {
  return waiting(rank, n, "all_reduce 'DistributedDataParallel step 5: gradients'",
                 " (Float [10], sum) at ddp.cpp:230", step);
}

TEST(CollectiveMismatch, DifferentCollectivesAreAMismatchNamingTheRankAlone) {
  const auto m = find_mismatch({barrier(0, 11), gradients(1, 11), gradients(2, 11)});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->alone, std::vector<int>({0}));
  EXPECT_EQ(m->others, std::vector<int>({1, 2}));
  // Another sequence number with the same operation is a mismatch too...
  RankView ahead = barrier(0, 12);
  ahead.progress->completed = 10;  // #11 launched, not completed
  EXPECT_TRUE(find_mismatch({ahead, barrier(1, 11)}));
  // ... but not when the rank behind is in one the other completed: it is
  // only finishing it (a broadcast's root is done before its receivers).
  EXPECT_FALSE(find_mismatch({barrier(0, 12), barrier(1, 11)}));
}

TEST(CollectiveMismatch, TheSameCollectiveFromAnotherCallSiteIsNone) {
  EXPECT_FALSE(find_mismatch({barrier(0, 11), waiting(1, 11, "barrier", " at eval.cpp:7")}));
  EXPECT_FALSE(find_mismatch({gradients(0, 4), gradients(1, 4), gradients(2, 4)}));
}

TEST(CollectiveMismatch, ARankOutsideCollectivesIsNone) {
  RankView computing = gradients(1, 10);
  computing.progress->completed = 10;
  computing.progress->ended_ms = kNow - 400;
  EXPECT_FALSE(find_mismatch({barrier(0, 11), computing}));
  RankView ended = gradients(1, 11);
  ended.ended = true;
  EXPECT_FALSE(find_mismatch({barrier(0, 11), ended}));
  RankView stopped = gradients(1, 11);
  stopped.stopped = true;
  EXPECT_FALSE(find_mismatch({barrier(0, 11), stopped}));
  EXPECT_FALSE(find_mismatch({barrier(0, 11)}));  // one rank
}

TEST(CollectiveMismatch, OfTwoRanksTheOneBehindOrFirstIsAlone) {
  // Fewer steps recorded: it stopped where the other went on.
  EXPECT_EQ(find_mismatch({barrier(0, 11, 3), gradients(1, 11, 4)})->alone, std::vector<int>({0}));
  EXPECT_EQ(find_mismatch({gradients(0, 11, 4), barrier(1, 11, 3)})->alone, std::vector<int>({1}));
  // The same step: the one that entered first.
  RankView late = gradients(0, 11, 3);
  late.progress->entered_ms = kNow - 100;
  EXPECT_EQ(find_mismatch({late, barrier(1, 11, 3)})->alone, std::vector<int>({1}));
  // The same step, the DDP rank in first (a loaded machine: it went on from
  // the epoch's end before rank 1 reached its barrier): the program's own
  // collective is the one entered alone (Deadlock.BarrierOnRankZeroAtEpochEnd
  // failed in CI this way).
  RankView early = gradients(0, 11, 3);
  early.progress->entered_ms = kNow - 900;
  EXPECT_EQ(find_mismatch({early, barrier(1, 11, 3)})->alone, std::vector<int>({1}));
  RankView early_one = gradients(1, 11, 3);
  early_one.progress->entered_ms = kNow - 900;
  EXPECT_EQ(find_mismatch({barrier(0, 11, 3), early_one})->alone, std::vector<int>({0}));
}

TEST(CollectiveMismatch, ReportNamesTheRankAloneItsCallSiteAndTheOthers) {
  const std::vector<RankView> views{barrier(0, 11), gradients(1, 11), gradients(2, 11)};
  const std::string report = format_mismatch_report(views, *find_mismatch(views), kNow, milliseconds(10000));
  EXPECT_NE(report.find("rankwise-run: deadlock: every rank waits in a collective, not all in the "
                        "same one, and none completed a collective for 10 s (--deadlock-timeout):\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("rankwise-run:   rank 1 (pid 101 on h, waiting in a collective): last in "
                        "all_reduce 'DistributedDataParallel step 5: gradients' #11"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("rankwise-run: rank 0 entered barrier #11 at train.cpp:95 alone, while "
                        "ranks 1, 2 waited in all_reduce 'DistributedDataParallel step 5: "
                        "gradients' #11 (Float [10], sum) at ddp.cpp:230; the others never "
                        "entered it."),
            std::string::npos)
      << report;
}

TEST(CollectiveMismatch, WatchdogFiresAfterTheWindowWithoutProgress) {
  HangWatchdog w(milliseconds(0), milliseconds(2000));  // --hang-timeout 0: only this check
  const auto t0 = Clock::now();
  std::vector<RankView> views{barrier(0, 11), gradients(1, 11)};
  EXPECT_FALSE(observe(w, views, t0, 0));
  EXPECT_FALSE(observe(w, views, t0, 1999));
  EXPECT_TRUE(observe(w, views, t0, 2000));
  EXPECT_TRUE(w.mismatched());
}

TEST(CollectiveMismatch, AnyProgressRestartsTheWindow) {
  HangWatchdog w(milliseconds(0), milliseconds(2000));
  const auto t0 = Clock::now();
  std::vector<RankView> views{barrier(0, 11), gradients(1, 11)};
  EXPECT_FALSE(observe(w, views, t0, 0));
  // Rank 1 launches 12 (say, its next bucket; 11 still in flight): progress.
  views[1] = gradients(1, 12);
  views[1].progress->completed = 10;
  EXPECT_FALSE(observe(w, views, t0, 1500));
  EXPECT_FALSE(observe(w, views, t0, 3000));
  EXPECT_TRUE(observe(w, views, t0, 3500));
}

TEST(CollectiveMismatch, ALongStepThatProgressesNeverFires) {
  // Rank 1 computes for a minute outside collectives while rank 0 waits in
  // the gradients' all_reduce: never a deadlock, however long.
  HangWatchdog w(milliseconds(0), milliseconds(2000));
  const auto t0 = Clock::now();
  RankView computing = gradients(1, 10);
  computing.progress->completed = 10;
  computing.progress->ended_ms = kNow - 400;
  std::vector<RankView> views{gradients(0, 11), computing};
  for (int s = 0; s <= 60; ++s) EXPECT_FALSE(observe(w, views, t0, s * 1000)) << s;
  EXPECT_FALSE(w.mismatched());
}

TEST(CollectiveMismatch, TheSameCollectiveEverywhereIsLeftToTheHangTimeout) {
  HangWatchdog w(milliseconds(5000), milliseconds(2000));
  const auto t0 = Clock::now();
  std::vector<RankView> views{gradients(0, 11), gradients(1, 11)};
  EXPECT_FALSE(observe(w, views, t0, 0));
  EXPECT_FALSE(observe(w, views, t0, 4000));
  EXPECT_TRUE(observe(w, views, t0, 5000));  // the hang check
  EXPECT_FALSE(w.mismatched());
}

}  // namespace
