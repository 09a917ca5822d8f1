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

TEST(MetricAccuracy, LabelsAndTopK) {
  Accuracy acc(ClassificationOptions(3));
  acc.update(longs({0, 1, 2, 1}), longs({0, 1, 1, 1}));  // 3 of 4 right
  EXPECT_EQ(value(acc.compute()), 0.75);
  EXPECT_EQ(acc.compute().scalar_type(), torch::kDouble);
  EXPECT_EQ(acc.state().at("correct").scalar_type(), torch::kLong);  // counts are int64

  auto scores = torch::tensor({0.1, 0.5, 0.4, 0.6, 0.3, 0.1, 0.2, 0.3, 0.5}).view({3, 3});
  auto target = longs({2, 1, 0});
  Accuracy top1(ClassificationOptions(3));
  top1.update(scores, target);  // argmax 1, 0, 2 vs 2, 1, 0: none right
  EXPECT_EQ(value(top1.compute()), 0.0);
  Accuracy top2(ClassificationOptions(3).top_k(2));
  top2.update(scores, target);  // {1,2} has 2; {0,1} has 1; {2,1} lacks 0: 2 of 3
  EXPECT_DOUBLE_EQ(value(top2.compute()), 2.0 / 3.0);
}

TEST(MetricAccuracy, EmptyIsNaNAndResetClears) {
  Accuracy acc(ClassificationOptions(2));
  EXPECT_TRUE(std::isnan(value(acc.compute())));
  acc.update(longs({1}), longs({1}));
  EXPECT_EQ(value(acc.compute()), 1.0);
  acc.reset();
  EXPECT_TRUE(std::isnan(value(acc.compute())));
}

TEST(MetricAccuracy, PaddingMaskLeavesDuplicatesOut) {
  // 5 samples, the last two are padding duplicates of wrong predictions.
  Accuracy acc(ClassificationOptions(2));
  std::vector<bool> pad{false, false, false, true, true};
  acc.update(longs({1, 1, 0, 0, 0}), longs({1, 1, 1, 1, 1}), pad);  // kept: 1,1,0 vs 1,1,1
  EXPECT_DOUBLE_EQ(value(acc.compute()), 2.0 / 3.0);
  // The same via a bool tensor and via a slice of a shard's mask.
  Accuracy a2(ClassificationOptions(2));
  a2.update(longs({0, 0}), longs({1, 1}), PaddingMask(pad, 3, 2));  // both padding
  a2.update(longs({1, 1, 0}), longs({1, 1, 1}), torch::tensor({false, false, false}));
  EXPECT_DOUBLE_EQ(value(a2.compute()), 2.0 / 3.0);
}

TEST(MetricAccuracy, Errors) {
  expect_config_error([] { Accuracy a(ClassificationOptions(0)); }, "num_classes must be > 0");
  expect_config_error([] { Accuracy a(ClassificationOptions(3).top_k(4)); }, "top_k");
  Accuracy acc(ClassificationOptions(3));
  expect_config_error([&] { acc.update(longs({0, 3}), longs({0, 1})); }, "outside [0, 3)");
  expect_config_error([&] { acc.update(longs({0, 1}), longs({0, -1})); }, "outside [0, 3)");
  expect_config_error([&] { acc.update(longs({0, 1, 2}), longs({0, 1})); }, "3 samples but target has 2");
  expect_config_error([&] { acc.update(torch::rand({2, 4}), longs({0, 1})); }, "num_classes is 3");
  expect_config_error([&] { acc.update(longs({0, 1}), doubles({0, 1})); }, "integer class labels");
  expect_config_error([&] { acc.update(longs({0, 1}), longs({0, 1}), std::vector<bool>{false}); },
                      "the padding mask has 1 entries but the batch has 2");
  expect_config_error([&] { PaddingMask m(std::vector<bool>(3), 2, 2); }, "outside the mask");
  Accuracy top2(ClassificationOptions(3).top_k(2));
  expect_config_error([&] { top2.update(longs({0}), longs({0})); }, "needs scores");
  EXPECT_EQ(value(acc.state().at("total")), 0);  // nothing was counted by failed updates
}

TEST(MetricConfusionMatrix, Counts) {
  // target 0 0 1 2 2 2, preds 0 1 1 2 0 2 (rows true, columns predicted)
  ConfusionMatrix cm(ClassificationOptions(3));
  cm.update(longs({0, 1, 1}), longs({0, 0, 1}));
  cm.update(longs({2, 0, 2}), longs({2, 2, 2}));
  auto expected = longs({1, 1, 0, 0, 1, 0, 1, 0, 2}).view({3, 3});
  auto got = cm.compute();
  EXPECT_EQ(got.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(got, expected)) << got;
}

TEST(MetricPrecisionRecallF1, MicroMacroNoneByHand) {
  // Same data as above: tp = [1, 1, 2], predicted = [2, 2, 2], actual = [2, 1, 3].
  auto preds = longs({0, 1, 1, 2, 0, 2});
  auto target = longs({0, 0, 1, 2, 2, 2});
  for (int64_t classes : {3, 5}) {  // classes 3, 4 absent: not in the macro mean (sklearn)
    Precision p{ClassificationOptions(classes)};
    Recall r{ClassificationOptions(classes)};
    F1 f{ClassificationOptions(classes)};
    p.update(preds, target);
    r.update(preds, target);
    f.update(preds, target);
    EXPECT_NEAR(value(p.compute()), (0.5 + 0.5 + 1.0) / 3, 1e-15);
    EXPECT_NEAR(value(r.compute()), (0.5 + 1.0 + 2.0 / 3) / 3, 1e-15);
    // per-class F1 = 2tp / (2tp + fp + fn) = 2/4, 2/3, 4/5
    EXPECT_NEAR(value(f.compute()), (0.5 + 2.0 / 3 + 0.8) / 3, 1e-15);
  }
  for (auto avg : {Average::kMicro}) {
    Precision p(ClassificationOptions(3).average(avg));
    Recall r(ClassificationOptions(3).average(avg));
    F1 f(ClassificationOptions(3).average(avg));
    p.update(preds, target);
    r.update(preds, target);
    f.update(preds, target);
    EXPECT_NEAR(value(p.compute()), 4.0 / 6, 1e-15);  // micro = accuracy for single-label data
    EXPECT_NEAR(value(r.compute()), 4.0 / 6, 1e-15);
    EXPECT_NEAR(value(f.compute()), 4.0 / 6, 1e-15);
  }
  Recall per_class(ClassificationOptions(4).average(Average::kNone));
  per_class.update(preds, target);
  auto got = per_class.compute();
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{4}));
  EXPECT_NEAR(got[0].item<double>(), 0.5, 1e-15);
  EXPECT_NEAR(got[1].item<double>(), 1.0, 1e-15);
  EXPECT_NEAR(got[2].item<double>(), 2.0 / 3, 1e-15);
  EXPECT_EQ(got[3].item<double>(), 0.0);  // 0/0 -> 0 (zero_division=0)
}

TEST(MetricPrecisionRecallF1, ZeroDivisionCountsAsZero) {
  // Class 1 is in the targets but never predicted: its precision is 0/0 -> 0,
  // and it still takes part in the macro mean (it is present).
  Precision p(ClassificationOptions(2));
  p.update(longs({0, 0, 0}), longs({0, 1, 1}));  // class 0: 1/3; class 1: 0/0 -> 0
  EXPECT_NEAR(value(p.compute()), (1.0 / 3 + 0) / 2, 1e-15);
  F1 f(ClassificationOptions(2));
  f.update(longs({0, 0, 0}), longs({0, 1, 1}));  // class 0: 2/(2+2+0) = .5; class 1: 0/(0+0+2) = 0
  EXPECT_NEAR(value(f.compute()), 0.25, 1e-15);
}

TEST(MetricPrecisionRecallF1, ScoresUseArgmax) {
  auto scores = torch::tensor({0.9, 0.1, 0.2, 0.8, 0.7, 0.3}).view({3, 2});  // argmax 0, 1, 0
  Recall r(ClassificationOptions(2).average(Average::kMicro));
  r.update(scores, longs({0, 1, 1}));
  EXPECT_NEAR(value(r.compute()), 2.0 / 3, 1e-15);
}

