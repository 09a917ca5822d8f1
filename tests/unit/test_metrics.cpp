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

using namespace rankwise::metrics;
using rankwise::ConfigError;

namespace {

torch::Tensor longs(std::vector<int64_t> v) { return torch::tensor(v, torch::kLong); }
torch::Tensor doubles(std::vector<double> v) { return torch::tensor(v, torch::kDouble); }
double value(const torch::Tensor& t) { return t.item<double>(); }

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

// Expects a ConfigError whose message contains `text`.
template <typename F>
void expect_config_error(F&& f, const std::string& text) {
  try {
    f();
    FAIL() << "expected ConfigError containing '" << text << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

}  // namespace

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

TEST(MetricState, SaveMidEpochRestoreAndPickle) {
  auto preds = torch::randint(0, 4, {40}, torch::kLong);
  auto target = torch::randint(0, 4, {40}, torch::kLong);
  auto scores = torch::rand({40}, torch::kDouble);
  auto binary = target.remainder(2);

  auto make = [] {
    auto c = std::make_unique<MetricCollection>();
    c->add("acc", std::make_shared<Accuracy>(ClassificationOptions(4)));
    c->add("f1", std::make_shared<F1>(ClassificationOptions(4)));
    c->add("auroc", std::make_shared<AUROC>());
    c->add("min", std::make_shared<Min>());
    return c;
  };
  auto feed = [&](MetricCollection& c, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i += 5) {
      dynamic_cast<Accuracy&>(c.at("acc")).update(preds.narrow(0, i, 5), target.narrow(0, i, 5));
      dynamic_cast<F1&>(c.at("f1")).update(preds.narrow(0, i, 5), target.narrow(0, i, 5));
      dynamic_cast<AUROC&>(c.at("auroc")).update(scores.narrow(0, i, 5), binary.narrow(0, i, 5));
      dynamic_cast<Min&>(c.at("min")).update(scores.narrow(0, i, 5));
    }
  };
  auto whole = make();
  feed(*whole, 0, 40);
  auto expected = whole->compute();

  auto first = make();
  feed(*first, 0, 20);
  // Through libtorch's pickler, as a checkpoint would store it.
  auto bytes = torch::pickle_save(c10::IValue(first->state()));
  auto restored_ivalue = torch::pickle_load(bytes);
  c10::Dict<std::string, torch::Tensor> restored;
  for (const auto& e : restored_ivalue.toGenericDict()) {
    restored.insert(e.key().toStringRef(), e.value().toTensor());
  }
  auto second = make();
  second->load_state(restored);
  feed(*second, 20, 40);
  auto got = second->compute();
  for (const auto& e : expected) {
    EXPECT_TRUE(torch::equal(got.at(e.first), e.second)) << e.first;
  }
  EXPECT_EQ(second->state().at("acc.total").item<int64_t>(), 40);

  // Loading into differently configured metrics fails and says why.
  Accuracy other(ClassificationOptions(4));
  auto f1_state = F1(ClassificationOptions(5)).state();
  F1 f1(ClassificationOptions(4));
  expect_config_error([&] { f1.load_state(f1_state); }, "has shape [5] but this metric expects [4]");
  expect_config_error([&] { other.load_state(f1_state); }, "unexpected state");
}

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
