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
using rankwise::test::value;
using rankwise::test::expect_config_error;

TEST(MetricCollection, LocalComputeIssuesNoCollective) {
  MetricCollection c;
  auto acc = c.add("acc", std::make_shared<Accuracy>(ClassificationOptions(2)));
  auto loss = c.add("loss", std::make_shared<Mean>());
  acc->update(longs({1, 0}), longs({1, 1}));
  loss->update(2.0, 4.0);
  auto values = c.compute();
  EXPECT_EQ(value(values.at("acc")), 0.5);
  EXPECT_EQ(value(values.at("loss")), 2.0);
  EXPECT_EQ(c.last_sync().all_reduce, 0);
  EXPECT_EQ(c.last_sync().all_gather, 0);
  expect_config_error([&] { c.add("acc", std::make_shared<Mean>()); }, "exists already");
  expect_config_error([&] { c.at("nope"); }, "no metric named 'nope'");
}

