// Single-process tests of the metric math. Expected values are computed by
// hand (comments show the arithmetic) or by an independent reference (the
// Mann-Whitney U statistic for AUROC), never by the code under test.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "rankwise/error.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/auroc.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"
#include "support/metrics.h"

using namespace rankwise::metrics;
using rankwise::ConfigError;
using rankwise::test::longs;
using rankwise::test::doubles;
using rankwise::test::value;
using rankwise::test::expect_config_error;

namespace {

// AUROC by the Mann-Whitney U statistic: the fraction of (positive, negative)
// pairs where the positive scores higher, ties counting 1/2. O(P * N).
double mann_whitney_auroc(const std::vector<double>& s, const std::vector<int>& y) {
  double u = 0;
  int64_t pos = 0, neg = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] == 1) ++pos; else ++neg;
    if (y[i] != 1) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] != 0) continue;
      u += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
    }
  }
  return u / (static_cast<double>(pos) * static_cast<double>(neg));
}


}  // namespace

TEST(MetricAUROC, HandExamplesAndTies) {
  // sklearn's roc_auc_score docstring example: 0.75.
  EXPECT_DOUBLE_EQ(binary_auroc(doubles({0.1, 0.4, 0.35, 0.8}), longs({0, 0, 1, 1})), 0.75);
  // Ties: positives {0.5, 0.5}, negatives {0.5, 0.2}: pairs 1/2 + 1 + 1/2 + 1 = 3 of 4.
  EXPECT_DOUBLE_EQ(binary_auroc(doubles({0.5, 0.5, 0.5, 0.2}), longs({1, 0, 1, 0})), 0.75);
  // All tied: 1/2.
  EXPECT_DOUBLE_EQ(binary_auroc(doubles({1, 1, 1, 1}), longs({1, 0, 1, 0})), 0.5);
  // bool targets and float32 scores are accepted.
  EXPECT_DOUBLE_EQ(binary_auroc(torch::tensor({0.9f, 0.1f}), torch::tensor({true, false})), 1.0);
  // One class only: undefined -> NaN.
  EXPECT_TRUE(std::isnan(binary_auroc(doubles({0.1, 0.2}), longs({1, 1}))));
  expect_config_error([] { binary_auroc(doubles({0.1, 0.2}), longs({0, 2})); }, "targets 0 or 1");
  expect_config_error([] { binary_auroc(doubles({0.1}), longs({0, 1})); }, "shape [N]");
  expect_config_error([] { binary_auroc(doubles({NAN, 0.1}), longs({0, 1})); }, "NaN");
}

TEST(MetricAUROC, MatchesMannWhitneyOnRandomTiedData) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> score(0, 9), label(0, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 5 + trial * 7;
    std::vector<double> s;
    std::vector<int> y;
    for (int i = 0; i < n; ++i) {
      s.push_back(score(gen) / 10.0);  // coarse scores: many ties
      y.push_back(label(gen));
    }
    y[0] = 0;
    y[1] = 1;
    const double expected = mann_whitney_auroc(s, y);
    AUROC metric;  // fed in uneven batches
    std::vector<int64_t> y64(y.begin(), y.end());
    const auto scores = torch::tensor(s, torch::kDouble);
    const auto target = torch::tensor(y64, torch::kLong);
    for (int start = 0; start < n; start += 4) {
      const int len = std::min(4, n - start);
      metric.update(scores.narrow(0, start, len), target.narrow(0, start, len));
    }
    EXPECT_NEAR(value(metric.compute()), expected, 1e-12) << "trial " << trial;
  }
}

