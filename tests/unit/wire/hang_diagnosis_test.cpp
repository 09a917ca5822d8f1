// Which ranks held a collective up, from the progress every rank published
// (wire/hang_diagnosis.h). The multi-process cases are test_hang_reports.
#include <gtest/gtest.h>

#include "wire/hang_diagnosis.h"

using rankwise::wire::describe_missing_ranks;
using rankwise::wire::CollectiveProgress;
using rankwise::wire::ranks_not_entered;

namespace {

constexpr int64_t kNow = 1'000'000;

CollectiveProgress record_at(uint64_t entered, bool completed, const std::string& last) {
  CollectiveProgress p;
  p.entered = entered;
  p.completed = completed ? entered : entered - 1;
  p.last = last;
  p.entered_ms = kNow - 5000;
  p.ended_ms = completed ? kNow - 4000 : 0;
  p.heartbeat_ms = kNow - 500;
  return p;
}

}  // namespace

TEST(HangDiagnosis, RanksThatDidTheSameAreGrouped) {
  std::vector<std::optional<CollectiveProgress>> progress{
      record_at(3, false, "barrier #3"), record_at(2, true, "all_reduce #2"), record_at(2, true, "all_reduce #2"),
      record_at(3, false, "barrier #3")};
  EXPECT_EQ(ranks_not_entered(0, 3, progress), (std::vector<int>{1, 2}));
  EXPECT_EQ(describe_missing_ranks(0, 3, progress, kNow),
            "ranks 1, 2 never entered it (#3): ranks 1, 2: last in all_reduce #2 (completed "
            "4.0 s ago); rank 3 had entered it");
}

TEST(HangDiagnosis, ExitedStoppedAndSilentRanksAreTold) {
  auto exited = record_at(2, true, "all_reduce #2");
  exited.exited = true;
  auto stopped = record_at(2, false, "all_reduce #2");
  stopped.heartbeat_ms = kNow - 9000;
  std::vector<std::optional<CollectiveProgress>> progress{record_at(3, false, "barrier #3"), exited, stopped,
                                                      std::nullopt, CollectiveProgress{}};
  progress[4]->heartbeat_ms = kNow;
  EXPECT_EQ(describe_missing_ranks(0, 3, progress, kNow),
            "ranks 1, 2, 3, 4 never entered it (#3): rank 1: exited (process group destroyed); "
            "last in all_reduce #2 (completed 4.0 s ago); rank 2: last in all_reduce #2 (entered "
            "5.0 s ago); heartbeat stopped 9.0 s ago (process stopped, e.g. SIGSTOP, or "
            "unresponsive); rank 3: no progress published (not started, or no process group "
            "created); rank 4: in no collective yet");
}

TEST(HangDiagnosis, NothingToSayWhenEveryRankEnteredIt) {
  std::vector<std::optional<CollectiveProgress>> progress{record_at(3, false, "b"), record_at(4, true, "c")};
  EXPECT_EQ(describe_missing_ranks(0, 3, progress, kNow), "");
  EXPECT_TRUE(ranks_not_entered(1, 3, progress).empty());
}
