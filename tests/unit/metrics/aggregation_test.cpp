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
using rankwise::test::doubles;
using rankwise::test::value;
using rankwise::test::expect_config_error;

TEST(MetricAggregation, SumMeanMinMax) {
  Mean mean;
  mean.update(doubles({1, 2, 3}));
  mean.update(10.0, 2.0);  // a batch mean of 10 over 2 samples
  EXPECT_DOUBLE_EQ(value(mean.compute()), (6.0 + 20.0) / 5.0);
  mean.update(doubles({100, 100}), std::vector<bool>{true, true});  // padding only
  EXPECT_DOUBLE_EQ(value(mean.compute()), 26.0 / 5.0);
  mean.update_weighted(doubles({4, 8}), doubles({1, 3}));  // + 4 + 24 over weight 4
  EXPECT_DOUBLE_EQ(value(mean.compute()), 54.0 / 9.0);
  EXPECT_TRUE(std::isnan(value(Mean().compute())));
  expect_config_error([&] { mean.update(1.0, -1.0); }, "weight must be");
  expect_config_error([&] { mean.update(torch::ones({2, 2})); }, "shape [N] or []");

  Sum sum;  // float32 inputs are summed in float64: 2^24 + 1 is exact
  sum.update(torch::tensor({16777216.0f}));
  sum.update(torch::tensor({1.0f}));
  EXPECT_EQ(value(sum.compute()), 16777217.0);

  Min mn;
  Max mx;
  EXPECT_EQ(value(mn.compute()), INFINITY);
  EXPECT_EQ(value(mx.compute()), -INFINITY);
  mn.update(doubles({3, -2, 7}));
  mx.update(doubles({3, -2, 7}));
  mn.update(doubles({-50}), std::vector<bool>{true});
  mx.update(5.0);
  EXPECT_EQ(value(mn.compute()), -2.0);
  EXPECT_EQ(value(mx.compute()), 7.0);
}

