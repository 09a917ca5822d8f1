// rankwise::monitor::ProgressBar in one process (no process group: the
// reduction is local): when it reduces (by the count of update() calls only),
// the sample-weighted loss, what rank 0 prints as a bar or as lines, and its
// option errors. The collective side runs in e2e.fashion_mnist_monitor.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "rankwise/error.h"
#include "rankwise/monitor/progress_bar.h"

namespace rankwise::monitor {
namespace {

ProgressBarOptions quiet() { return ProgressBarOptions().style(ProgressBarStyle::kOff); }

TEST(ProgressBar, ReducesEveryNCallsAndAtTheEpochsEnd) {
  ProgressBar p(quiet().every_n_steps(3));
  p.start_epoch(1, 2, 7);
  std::vector<bool> reduced;
  for (int i = 0; i < 7; ++i) reduced.push_back(p.update(10, torch::tensor(1.0)));
  EXPECT_EQ(reduced, (std::vector<bool>{false, false, true, false, false, true, false}));
  EXPECT_TRUE(p.end_epoch());  // the 7th step was pending
  EXPECT_EQ(p.step(), 7);
  p.start_epoch(2, 2, 3);
  for (int i = 0; i < 3; ++i) p.update(10, torch::tensor(1.0));
  EXPECT_FALSE(p.end_epoch());  // nothing pending: no reduction (the same decision on every rank)
}

TEST(ProgressBar, LossIsWeightedBySamplesSinceTheLastReduction) {
  ProgressBar p(quiet().every_n_steps(3));
  EXPECT_TRUE(std::isnan(p.loss()));
  EXPECT_TRUE(std::isnan(p.samples_per_second()));
  p.start_epoch(1, 1, 6);
  p.update(10, torch::tensor(1.0f));
  p.update(10, torch::tensor(2.0f));
  p.update(20, torch::tensor(3.0f));
  EXPECT_DOUBLE_EQ(p.loss(), (10 * 1.0 + 10 * 2.0 + 20 * 3.0) / 40);  // 2.25
  EXPECT_GT(p.samples_per_second(), 0);
  p.update(5, torch::tensor(4.0));
  p.update(5);  // no loss this step: its samples count for throughput only
  EXPECT_TRUE(p.end_epoch());
  EXPECT_DOUBLE_EQ(p.loss(), 4.0);
}

TEST(ProgressBar, LinesModePrintsPlainLinesWithoutCarriageReturns) {
  ProgressBar p(ProgressBarOptions().style(ProgressBarStyle::kLines).every_n_steps(2).line_interval(std::chrono::milliseconds(0)));
  ::testing::internal::CaptureStdout();
  p.start_epoch(1, 2, 4);
  for (int i = 0; i < 4; ++i) p.update(8, torch::tensor(0.5));
  p.end_epoch();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out.rfind("progress: epoch 1 of 2, step 2/4 (50%) | ", 0), 0u) << out;
  EXPECT_NE(out.find("\nprogress: epoch 1 of 2, step 4/4 (100%) | "), std::string::npos) << out;
  EXPECT_NE(out.find(" samples/s | loss 0.5000 | ETA "), std::string::npos) << out;
  // Two reductions, two lines; the epoch's end adds none (the program prints its summary).
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
}

TEST(ProgressBar, LinesModeWaitsForTheInterval) {
  ProgressBar p(ProgressBarOptions().style(ProgressBarStyle::kLines).every_n_steps(1).line_interval(std::chrono::hours(1)));
  ::testing::internal::CaptureStdout();
  p.start_epoch(1, 1, 5);
  for (int i = 0; i < 5; ++i) p.update(8, torch::tensor(0.5));
  p.end_epoch();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // the first reduction only
}

TEST(ProgressBar, BarRewritesOneLineAndEndsItAtTheEpochsEnd) {
  ProgressBar p(ProgressBarOptions().style(ProgressBarStyle::kBar).every_n_steps(2).bar_width(4));
  ::testing::internal::CaptureStdout();
  p.start_epoch(3, 5, 4);
  for (int i = 0; i < 4; ++i) p.update(8, torch::tensor(0.25));
  p.end_epoch();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.rfind("\repoch 3 of 5 [##..] 2/4 | ", 0), 0u) << out;
  EXPECT_NE(out.find("\x1b[K\repoch 3 of 5 [####] 4/4 | "), std::string::npos) << out;
  EXPECT_NE(out.find("loss 0.2500"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // one line, ended once
  EXPECT_EQ(out.back(), '\n');
}

TEST(ProgressBar, OffPrintsNothing) {
  ProgressBar p(quiet().every_n_steps(1));
  ::testing::internal::CaptureStdout();
  p.start_epoch(1, 1, 2);
  p.update(1, torch::tensor(1.0));
  p.end_epoch();
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
}

TEST(ProgressBar, BadOptionsAreConfigErrors) {
  EXPECT_THROW(ProgressBar(ProgressBarOptions().every_n_steps(0)), ConfigError);
  EXPECT_THROW(ProgressBar(ProgressBarOptions().bar_width(0)), ConfigError);
  EXPECT_THROW(ProgressBar(ProgressBarOptions().line_interval(std::chrono::milliseconds(-1))), ConfigError);
  ProgressBar p(quiet());
  EXPECT_THROW(p.start_epoch(1, 1, 4, 5), ConfigError);
  EXPECT_THROW(parse_progress_style("fancy"), ConfigError);
  EXPECT_EQ(parse_progress_style("lines"), ProgressBarStyle::kLines);
}

}  // namespace
}  // namespace rankwise::monitor
