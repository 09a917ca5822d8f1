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
using rankwise::test::value;
using rankwise::test::expect_config_error;

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

