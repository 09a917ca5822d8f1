// The straggler rule of rankwise-run --monitor (launch/watch/straggler_detector.h):
// a rank computing more than the threshold over the median, by at least
// kMinExcessMs, at every observation for the window; the lines it prints.
#include <gtest/gtest.h>

#include "launch/watch/straggler_detector.h"

namespace {

using namespace rankwise::launch;
using namespace rankwise::launch::watch;
using namespace std::chrono_literals;
using Clock = StragglerDetector::Clock;

std::vector<RankCompute> ranks(std::vector<std::optional<double>> compute) {
  std::vector<RankCompute> out;
  for (std::size_t r = 0; r < compute.size(); ++r) {
    out.push_back({static_cast<int>(r), "h" + std::to_string(r), compute[r]});
  }
  return out;
}

TEST(StragglerDetector, Median) {
  EXPECT_FALSE(median({}));
  EXPECT_EQ(*median({5}), 5);
  EXPECT_EQ(*median({9, 1, 5}), 5);
  EXPECT_EQ(*median({4, 1, 3, 10}), 3.5);
}

TEST(StragglerDetector, FlagsARankOverTheThresholdForTheWholeWindowOnce) {
  StragglerDetector d(0.2, 5000ms);
  const Clock::time_point t0{};
  // Rank 2: 52 ms against a median of 37 ms (41 % over).
  const auto slow = ranks({37.0, 36.0, 52.0});
  EXPECT_TRUE(d.observe(slow, t0).empty());
  EXPECT_TRUE(d.observe(slow, t0 + 4900ms).empty());
  EXPECT_FALSE(d.flagged(2));
  auto events = d.observe(slow, t0 + 6000ms);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].started);
  EXPECT_EQ(events[0].rank, 2);
  EXPECT_TRUE(d.flagged(2));
  EXPECT_FALSE(d.flagged(0));
  EXPECT_FALSE(d.flagged(1));
  EXPECT_EQ(format_straggler_event(events[0]),
            "rankwise-run: straggler: rank 2 (host h2) computes 52 ms/step, 41 % over the median "
            "37 ms, for 6 s\n");
  EXPECT_TRUE(d.observe(slow, t0 + 9000ms).empty());  // said once
  // Back under the line: it ends, once.
  events = d.observe(ranks({37.0, 36.0, 38.0}), t0 + 23000ms);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].started);
  EXPECT_FALSE(d.flagged(2));
  EXPECT_EQ(format_straggler_event(events[0]),
            "rankwise-run: straggler: rank 2 (host h2) no longer: computes 38 ms/step, median "
            "37 ms (it was one for 23 s)\n");
  EXPECT_TRUE(d.observe(ranks({37.0, 36.0, 38.0}), t0 + 24000ms).empty());
}

TEST(StragglerDetector, AnObservationUnderTheLineRestartsTheWindow) {
  StragglerDetector d(0.2, 5000ms);
  const Clock::time_point t0{};
  EXPECT_TRUE(d.observe(ranks({10.0, 10.0, 20.0}), t0).empty());
  EXPECT_TRUE(d.observe(ranks({10.0, 10.0, 11.0}), t0 + 3000ms).empty());  // 10 %: under
  EXPECT_TRUE(d.observe(ranks({10.0, 10.0, 20.0}), t0 + 4000ms).empty());
  EXPECT_TRUE(d.observe(ranks({10.0, 10.0, 20.0}), t0 + 8000ms).empty());  // 4 s since 4 s
  EXPECT_EQ(d.observe(ranks({10.0, 10.0, 20.0}), t0 + 9000ms).size(), 1u);
}

TEST(StragglerDetector, EvenRanksTinyDifferencesAndLoneRanksAreNeverFlagged) {
  StragglerDetector d(0.2, 1000ms);
  const Clock::time_point t0{};
  for (int i = 0; i < 5; ++i) {
    const auto t = t0 + std::chrono::seconds(2 * i);
    EXPECT_TRUE(d.observe(ranks({37.0, 39.0, 40.0, 38.5}), t).empty());  // 4 % over at most
    EXPECT_TRUE(d.observe(ranks({1.0, 1.0, 2.5}), t).empty());  // 150 % over, but 1.5 ms
    EXPECT_TRUE(d.observe(ranks({std::nullopt, 80.0, std::nullopt}), t).empty());  // no median
  }
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(d.flagged(r));
}

TEST(StragglerDetector, ThresholdIsAParameter) {
  StragglerDetector d(0.5, 1000ms);
  const Clock::time_point t0{};
  d.observe(ranks({10.0, 10.0, 14.0}), t0);
  EXPECT_TRUE(d.observe(ranks({10.0, 10.0, 14.0}), t0 + 2000ms).empty());  // 40 % < 50 %
  d.observe(ranks({10.0, 10.0, 16.0}), t0 + 3000ms);
  EXPECT_EQ(d.observe(ranks({10.0, 10.0, 16.0}), t0 + 4000ms).size(), 1u);  // 60 %
}

TEST(StragglerDetector, AFlaggedRankThatStopsReportingEnds) {
  StragglerDetector d(0.2, 1000ms);
  const Clock::time_point t0{};
  d.observe(ranks({10.0, 10.0, 30.0}), t0);
  ASSERT_EQ(d.observe(ranks({10.0, 10.0, 30.0}), t0 + 1000ms).size(), 1u);
  const auto events = d.observe(ranks({10.0, 10.0, std::nullopt}), t0 + 2000ms);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].started);
  EXPECT_NE(format_straggler_event(events[0]).find("no longer: it reports no step time"),
            std::string::npos);
}

}  // namespace
