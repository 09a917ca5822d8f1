// launch::HangWatchdog and its report: when every rank is blocked and no
// collective completes for the whole timeout it is a hang; any rank working
// outside collectives, or any completion, starts the clock again.
#include <gtest/gtest.h>

#include "launch/hang_watchdog.h"

namespace {

using rankwise::detail::ProgressRecord;
using rankwise::launch::activity_of;
using rankwise::launch::HangWatchdog;
using rankwise::launch::RankActivity;
using rankwise::launch::RankView;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kNow = 1'000'000'000;  // Unix ms of the observations

// A rank inside collective `entered` (completed the one before).
RankView waiting(int rank, uint64_t entered) {
  ProgressRecord p;
  p.entered = entered;
  p.completed = entered - 1;
  p.last = "all_reduce #" + std::to_string(entered) + " (Float [2], sum) at t.cpp:9";
  p.entered_ms = kNow - 500;
  p.heartbeat_ms = kNow - 100;
  p.pid = 100 + rank;
  p.host = "h";
  return {rank, p, true, false, false};
}

// A rank that completed collective `completed` and works outside collectives.
RankView working(int rank, uint64_t completed) {
  RankView v = waiting(rank, completed);
  v.progress->completed = completed;
  v.progress->ended_ms = kNow - 400;
  return v;
}

TEST(HangWatchdog, ActivityOfEachKindOfRank) {
  EXPECT_EQ(activity_of(waiting(0, 3), kNow), RankActivity::kInCollective);
  EXPECT_EQ(activity_of(working(0, 3), kNow), RankActivity::kWorking);
  RankView none{0, std::nullopt, true, false, false};
  EXPECT_EQ(activity_of(none, kNow), RankActivity::kWorking);  // still loading, say
  RankView stopped = working(0, 3);
  stopped.stopped = true;
  EXPECT_EQ(activity_of(stopped, kNow), RankActivity::kStopped);
  RankView stale = waiting(0, 3);
  stale.progress->heartbeat_ms = kNow - 2600;  // beats every second
  EXPECT_EQ(activity_of(stale, kNow), RankActivity::kStopped);
  RankView exited = working(0, 3);
  exited.progress->exited = true;
  EXPECT_EQ(activity_of(exited, kNow), RankActivity::kEnded);
  RankView ended{0, std::nullopt, true, false, true};
  EXPECT_EQ(activity_of(ended, kNow), RankActivity::kEnded);
}

TEST(HangWatchdog, AllBlockedForTheTimeoutIsAHang) {
  HangWatchdog w(milliseconds(2000));
  const auto t0 = Clock::now();
  RankView stopped = working(1, 5);
  stopped.stopped = true;
  const std::vector<RankView> ranks{waiting(0, 6), stopped};
  EXPECT_FALSE(w.observe(ranks, t0, kNow));
  EXPECT_FALSE(w.observe(ranks, t0 + milliseconds(1999), kNow));
  EXPECT_TRUE(w.observe(ranks, t0 + milliseconds(2000), kNow));
}

TEST(HangWatchdog, AWorkingRankOrACompletionRestartsTheClock) {
  HangWatchdog w(milliseconds(2000));
  const auto t0 = Clock::now();
  EXPECT_FALSE(w.observe({waiting(0, 6), waiting(1, 6)}, t0, kNow));
  // At 1.5 s rank 1 works outside collectives (rank 0 alone in #6).
  EXPECT_FALSE(w.observe({waiting(0, 6), working(1, 6)}, t0 + milliseconds(1500), kNow));
  EXPECT_FALSE(w.observe({waiting(0, 7), waiting(1, 7)}, t0 + milliseconds(2500), kNow));
  // Both in #7 since 2.5 s, but at 3 s rank 0 completed #7 and waits in #8.
  EXPECT_FALSE(w.observe({waiting(0, 8), waiting(1, 7)}, t0 + milliseconds(3000), kNow));
  EXPECT_FALSE(w.observe({waiting(0, 8), waiting(1, 7)}, t0 + milliseconds(4999), kNow));
  EXPECT_TRUE(w.observe({waiting(0, 8), waiting(1, 7)}, t0 + milliseconds(5000), kNow));
}

TEST(HangWatchdog, EveryRankEndedOrWorkingIsNeverAHang) {
  HangWatchdog w(milliseconds(100));
  const auto t0 = Clock::now();
  RankView ended{1, std::nullopt, true, false, true};
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(w.observe({working(0, 4), ended}, t0 + milliseconds(100 * i), kNow));
    RankView ended0{0, std::nullopt, true, false, true};
    EXPECT_FALSE(w.observe({ended0, ended}, t0 + milliseconds(100 * i + 50), kNow));
  }
}

TEST(HangWatchdog, WhoHeldTheOthersUp) {
  using rankwise::launch::ranks_holding_up;
  RankView stopped = working(2, 5);
  stopped.stopped = true;
  EXPECT_EQ(ranks_holding_up({waiting(0, 6), waiting(1, 6), stopped}, kNow), std::vector<int>{2});
  RankView ended{1, std::nullopt, true, false, true};
  EXPECT_EQ(ranks_holding_up({waiting(0, 6), ended}, kNow), std::vector<int>{1});
  EXPECT_EQ(ranks_holding_up({waiting(0, 7), waiting(1, 6), waiting(2, 6)}, kNow),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(ranks_holding_up({waiting(0, 6), waiting(1, 6)}, kNow), (std::vector<int>{0, 1}));
}

TEST(HangWatchdog, ReportHasOneLinePerRankAndTheVerdict) {
  RankView stopped = working(1, 5);
  stopped.stopped = true;
  const std::string report =
      rankwise::launch::format_hang_report({waiting(0, 6), stopped}, kNow, milliseconds(2500));
  EXPECT_EQ(report,
            "rankwise-run: hang: for 2.5 s no rank completed a collective and none was working "
            "outside one (--hang-timeout 2.5):\n"
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
  EXPECT_EQ(rankwise::launch::format_stack_dump(raw, "> "),
            "> stack dump of pid 7\n"
            "> thread 7 (train):\n"
            ">     rankwise::ProcessGroup::barrier(std::source_location) +0x2a in librankwise.so\n"
            ">     ?? +0x1234 in train\n");
}

}  // namespace
