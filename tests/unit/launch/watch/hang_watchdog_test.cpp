// launch::HangWatchdog and its report: when every rank is blocked and no
// collective completes for the whole timeout it is a hang; any rank working
// outside collectives, or any completion, starts the clock again.
#include <gtest/gtest.h>

#include "launch/watch/hang_watchdog.h"

namespace {

using rankwise::wire::CollectiveProgress;
using rankwise::launch::watch::activity_of;
using rankwise::launch::watch::HangWatchdog;
using rankwise::launch::watch::RankActivity;
using rankwise::launch::watch::RankView;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kNow = 1'000'000'000;  // Unix ms of the observations

// A rank inside collective `entered` (completed the one before).
RankView waiting(int rank, uint64_t entered) {
  CollectiveProgress p;
  p.entered = entered;
  p.completed = entered - 1;
  p.last = "all_reduce #" + std::to_string(entered) + " (Float [2], sum) at t.cpp:9";
  p.entered_ms = kNow - 500;
  p.heartbeat_ms = kNow - 100;
  p.pid = 100 + rank;
  p.host = "h";
  return {rank, p, true, false, false, false};
}

// A rank that completed collective `completed` and works outside collectives.
RankView working(int rank, uint64_t completed) {
  RankView v = waiting(rank, completed);
  v.progress->completed = completed;
  v.progress->ended_ms = kNow - 400;
  return v;
}

TEST(HangWatchdog, ActivityOfEachKindOfRank) {
  EXPECT_EQ(activity_of(waiting(0, 3)), RankActivity::kInCollective);
  EXPECT_EQ(activity_of(working(0, 3)), RankActivity::kWorking);
  RankView none{0, std::nullopt, true, false, false, false};
  EXPECT_EQ(activity_of(none), RankActivity::kWorking);  // still loading, say
  RankView stopped = working(0, 3);
  stopped.stopped = true;
  EXPECT_EQ(activity_of(stopped), RankActivity::kStopped);
  RankView stale = waiting(0, 3);
  stale.heartbeat_stale = true;
  EXPECT_EQ(activity_of(stale), RankActivity::kStopped);
  RankView exited = working(0, 3);
  exited.progress->exited = true;
  EXPECT_EQ(activity_of(exited), RankActivity::kEnded);
  RankView ended{0, std::nullopt, true, false, true, false};
  EXPECT_EQ(activity_of(ended), RankActivity::kEnded);
}

TEST(HangWatchdog, AllBlockedForTheTimeoutIsAHang) {
  HangWatchdog w(milliseconds(2000));
  const auto t0 = Clock::now();
  RankView stopped = working(1, 5);
  stopped.stopped = true;
  std::vector<RankView> ranks{waiting(0, 6), stopped};
  EXPECT_FALSE(w.observe(ranks, t0));
  EXPECT_FALSE(w.observe(ranks, t0 + milliseconds(1999)));
  EXPECT_TRUE(w.observe(ranks, t0 + milliseconds(2000)));
}

// Observes `ranks` as they are, each with a heartbeat that just changed.
bool observe(HangWatchdog& w, std::vector<RankView> ranks, Clock::time_point t) {
  for (auto& v : ranks) {
    if (v.progress) v.progress->heartbeat_ms = std::chrono::duration_cast<milliseconds>(
                        t.time_since_epoch()).count();
  }
  return w.observe(ranks, t);
}

TEST(HangWatchdog, AWorkingRankOrACompletionRestartsTheClock) {
  HangWatchdog w(milliseconds(2000));
  const auto t0 = Clock::now();
  EXPECT_FALSE(observe(w, {waiting(0, 6), waiting(1, 6)}, t0));
  // At 1.5 s rank 1 works outside collectives (rank 0 alone in #6).
  EXPECT_FALSE(observe(w, {waiting(0, 6), working(1, 6)}, t0 + milliseconds(1500)));
  EXPECT_FALSE(observe(w, {waiting(0, 7), waiting(1, 7)}, t0 + milliseconds(2500)));
  // Both in #7 since 2.5 s, but at 3 s rank 0 completed #7 and waits in #8.
  EXPECT_FALSE(observe(w, {waiting(0, 8), waiting(1, 7)}, t0 + milliseconds(3000)));
  EXPECT_FALSE(observe(w, {waiting(0, 8), waiting(1, 7)}, t0 + milliseconds(4999)));
  EXPECT_TRUE(observe(w, {waiting(0, 8), waiting(1, 7)}, t0 + milliseconds(5000)));
}

TEST(HangWatchdog, EveryRankEndedOrWorkingIsNeverAHang) {
  HangWatchdog w(milliseconds(100));
  const auto t0 = Clock::now();
  RankView ended{1, std::nullopt, true, false, true, false};
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(observe(w, {working(0, 4), ended}, t0 + milliseconds(100 * i)));
    RankView ended0{0, std::nullopt, true, false, true, false};
    EXPECT_FALSE(observe(w, {ended0, ended}, t0 + milliseconds(100 * i + 50)));
  }
}

TEST(HangWatchdog, AHeartbeatThatStopsChangingIsStaleWhateverTheWorkersClock) {
  HangWatchdog w(milliseconds(10000));
  const auto t0 = Clock::now();
  // Rank 0's clock is 5 s behind the launcher's, rank 1's 5 s ahead: only
  // whether the value changes counts.
  std::vector<RankView> ranks{working(0, 3), working(1, 3)};
  for (int i = 0; i <= 4; ++i) {
    ranks[0].progress->heartbeat_ms = kNow - 5000 + 1000 * i;
    ranks[1].progress->heartbeat_ms = kNow + 5000 + (i < 2 ? 1000 * i : 1000);  // stops at 1 s
    EXPECT_FALSE(w.observe(ranks, t0 + milliseconds(1000 * i)));
    EXPECT_FALSE(ranks[0].heartbeat_stale) << i;
    EXPECT_EQ(ranks[1].heartbeat_stale, i == 4) << i;  // unchanged for 3 s > 2.5 s
  }
}

TEST(HangWatchdog, ARankStoppedForTheTimeoutIsAHangWhateverTheOthersDo) {
  // Inside DDP's backward the others wait in bucket all_reduces the recorder
  // does not see: they look like working.
  HangWatchdog w(milliseconds(2000));
  const auto t0 = Clock::now();
  RankView stopped = working(1, 5);
  stopped.stopped = true;
  EXPECT_FALSE(observe(w, {working(0, 5), stopped}, t0));
  EXPECT_FALSE(observe(w, {working(0, 5), stopped}, t0 + milliseconds(1999)));
  EXPECT_TRUE(observe(w, {working(0, 5), stopped}, t0 + milliseconds(2000)));
  // One rank alone is never a hang.
  HangWatchdog alone(milliseconds(100));
  EXPECT_FALSE(observe(alone, {stopped}, t0));
  EXPECT_FALSE(observe(alone, {stopped}, t0 + milliseconds(1000)));
}

TEST(HangWatchdog, WhoHeldTheOthersUp) {
  using rankwise::launch::watch::ranks_holding_up;
  RankView stopped = working(2, 5);
  stopped.stopped = true;
  EXPECT_EQ(ranks_holding_up({waiting(0, 6), waiting(1, 6), stopped}), std::vector<int>{2});
  RankView ended{1, std::nullopt, true, false, true, false};
  EXPECT_EQ(ranks_holding_up({waiting(0, 6), ended}), std::vector<int>{1});
  EXPECT_EQ(ranks_holding_up({waiting(0, 7), waiting(1, 6), waiting(2, 6)}),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(ranks_holding_up({waiting(0, 6), waiting(1, 6)}), (std::vector<int>{0, 1}));
}

TEST(HangWatchdog, ReportHasOneLinePerRankAndTheVerdict) {
  RankView stopped = working(1, 5);
  stopped.stopped = true;
  const std::string report =
      rankwise::launch::watch::format_hang_report({waiting(0, 6), stopped}, kNow, milliseconds(2500));
  EXPECT_EQ(report,
            "rankwise-run: hang: no rank can make progress (for 2.5 s every rank was blocked with "
            "no collective completed, or a rank was stopped; --hang-timeout):\n"
            "rankwise-run:   rank 0 (pid 100 on h, waiting in a collective): last in all_reduce "
            "#6 (Float [2], sum) at t.cpp:9 (entered 0.5 s ago)\n"
            "rankwise-run:   rank 1 (pid 101 on h, stopped): last in all_reduce #5 (Float [2], "
            "sum) at t.cpp:9 (completed 0.4 s ago)\n"
            "rankwise-run: rank 1 held the others up\n");
}

TEST(HangWatchdog, StackDumpIsDemangledAndPrefixed) {
  const std::string raw =
      "stack dump of pid 7\n"
      "thread 7 (train):\n"
      "/usr/lib/librankwise.so(_ZN8rankwise12ProcessGroup7barrierESt15source_location+0x2a) "
      "[0x7f00]\n"
      "./train(+0x1234) [0x5500]\n"
      "end of stack dump\n";
  EXPECT_EQ(rankwise::launch::watch::format_stack_dump(raw, "> "),
            "> stack dump of pid 7\n"
            "> thread 7 (train):\n"
            ">     rankwise::ProcessGroup::barrier(std::source_location) +0x2a in librankwise.so\n"
            ">     ?? +0x1234 in train\n");
}

}  // namespace
