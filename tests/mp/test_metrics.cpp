// rankwise-test-nproc: 1 2 3 4
//
// Distributed metrics across ranks. Every test is written for any world size
// (the line above registers mp.test_metrics.ws1 ... ws4, one run per rank
// count), so the same expectations hold at every size: the results do not depend on
// the world size. Expected values come from hand computation (see comments)
// or from the Mann-Whitney U statistic, never from the code under test.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "rankwise/data/distributed_sampler.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/auroc.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/dist/process_group.h"

using namespace rankwise::metrics;

namespace {

rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}

double value(const torch::Tensor& t) { return t.item<double>(); }

double mann_whitney_auroc(const std::vector<double>& s, const std::vector<int64_t>& y) {
  double u = 0;
  double pos = 0, neg = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] == 1) pos += 1; else neg += 1;
    if (y[i] != 1) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] == 0) u += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
    }
  }
  return u / (pos * neg);
}

// The 10-sample evaluation set: labels i % 3; predictions right except on
// samples 0 and 1; per-sample loss 1 when wrong, 0 when right; binary targets
// and scores (with ties) for AUROC.
const std::vector<int64_t> kLabels{0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
const std::vector<int64_t> kPreds{1, 2, 2, 0, 1, 2, 0, 1, 2, 0};
const std::vector<double> kScores{0.9, 0.2, 0.7, 0.7, 0.1, 0.4, 0.9, 0.3, 0.7, 0.5};
const std::vector<int64_t> kBinary{1, 0, 1, 0, 0, 1, 1, 0, 0, 1};

torch::Tensor pick_long(const std::vector<int64_t>& all, const std::vector<int64_t>& idx) {
  std::vector<int64_t> out;
  for (auto i : idx) out.push_back(all[static_cast<size_t>(i)]);
  return torch::tensor(out, torch::kLong);
}

torch::Tensor pick_double(const std::vector<double>& all, const std::vector<int64_t>& idx) {
  std::vector<double> out;
  for (auto i : idx) out.push_back(all[static_cast<size_t>(i)]);
  return torch::tensor(out, torch::kDouble);
}

}  // namespace

TEST(DistributedMetrics, PaddingDuplicatesAreNeverCounted) {
  auto& pg = group();
  for (bool shuffle : {false, true}) {
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      rankwise::data::DistributedSampler sampler(10, rankwise::data::DistributedSamplerOptions().shuffle(shuffle).seed(3));
      sampler.set_epoch(epoch);
      const auto indices = sampler.indices();
      const auto padding = sampler.is_padding();
      MetricCollection metrics;
      auto acc = metrics.add("acc", std::make_shared<Accuracy>(ClassificationOptions(3)));
      auto loss = metrics.add("loss", std::make_shared<Mean>());
      auto f1 = metrics.add("f1", std::make_shared<F1>(ClassificationOptions(3)));
      auto auroc = metrics.add("auroc", std::make_shared<AUROC>());
      Accuracy naive(ClassificationOptions(3));  // counts the duplicates
      const int64_t batch = 2;
      for (int64_t off = 0; off < static_cast<int64_t>(indices.size()); off += batch) {
        const int64_t len = std::min<int64_t>(batch, static_cast<int64_t>(indices.size()) - off);
        std::vector<int64_t> idx(indices.begin() + off, indices.begin() + off + len);
        PaddingMask mask(padding, off, len);
        auto preds = pick_long(kPreds, idx), target = pick_long(kLabels, idx);
        acc->update(preds, target, mask);
        loss->update(preds.ne(target).to(torch::kDouble), mask);
        f1->update(preds, target, mask);
        auroc->update(pick_double(kScores, idx), pick_long(kBinary, idx), mask);
        naive.update(preds, target);
      }
      auto values = metrics.compute();
      EXPECT_DOUBLE_EQ(value(values.at("acc")), 0.8) << "shuffle " << shuffle << " epoch " << epoch;
      EXPECT_DOUBLE_EQ(value(values.at("loss")), 0.2);
      // per-class F1 = 2tp/(2tp+fp+fn): class 0: 6/7, class 1: 4/6, class 2: 6/7
      EXPECT_NEAR(value(values.at("f1")), (6.0 / 7 + 2.0 / 3 + 6.0 / 7) / 3, 1e-15);
      EXPECT_NEAR(value(values.at("auroc")), mann_whitney_auroc(kScores, kBinary), 1e-12);
      if (pg.world_size() > 1) {
        EXPECT_EQ(metrics.last_sync().all_reduce, 1);  // acc, loss and f1 together
        EXPECT_EQ(metrics.last_sync().all_gather, 2);  // AUROC: lengths, then data
      }
      const double naive_value = value(naive.compute());
      if (pg.world_size() == 3 && !shuffle) {
        // 12 positions: samples 0 and 1 (both wrong) are repeated: 8 / 12.
        EXPECT_DOUBLE_EQ(naive_value, 8.0 / 12.0);
      }
      if (10 % pg.world_size() == 0) EXPECT_DOUBLE_EQ(naive_value, 0.8);  // no padding at all
    }
  }
}

TEST(DistributedMetrics, UnequalCountsAreWeighted) {
  auto& pg = group();
  if (pg.world_size() < 2) GTEST_SKIP() << "needs 2 ranks or more";
  // Rank 0: 300 samples at accuracy 0.9 and loss 1; rank 1: 100 at 0.5 and
  // loss 3; other ranks: none. Pooled: 320 / 400 = 0.8 (the mean of the
  // means would be 0.7); loss (300 * 1 + 100 * 3) / 400 = 1.5 (not 2).
  Accuracy acc(ClassificationOptions(2));
  Mean loss, loss_from_batches;
  const int64_t n = pg.rank() == 0 ? 300 : pg.rank() == 1 ? 100 : 0;
  const int64_t right = pg.rank() == 0 ? 270 : pg.rank() == 1 ? 50 : 0;
  auto target = torch::ones({n}, torch::kLong);
  auto preds = torch::ones({n}, torch::kLong);
  if (n > right) preds.narrow(0, right, n - right).fill_(0);
  acc.update(preds, target);
  const double per_sample = pg.rank() == 0 ? 1.0 : 3.0;
  loss.update(torch::full({n}, per_sample, torch::kDouble));
  loss_from_batches.update(per_sample, static_cast<double>(n));  // a batch mean and its size
  EXPECT_DOUBLE_EQ(value(acc.compute()), 0.8);
  EXPECT_DOUBLE_EQ(value(loss.compute()), 1.5);
  EXPECT_DOUBLE_EQ(value(loss_from_batches.compute()), 1.5);
  EXPECT_EQ(acc.last_sync().all_reduce, 1);
}

TEST(DistributedMetrics, AurocGathersShardsOfDifferentLengths) {
  auto& pg = group();
  // Shards of 7, 5, 0 (and 0 for a 4th rank) samples: lengths differ and one is empty.
  const std::vector<double> scores{0.3, 0.8, 0.8, 0.1, 0.55, 0.3, 0.9, 0.8, 0.2, 0.3, 0.65, 0.1};
  const std::vector<int64_t> labels{0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0};
  const std::vector<int64_t> begin{0, 7, 12, 12}, length{7, 5, 0, 0};
  const auto r = static_cast<size_t>(pg.rank());
  AUROC auroc;
  auto s = torch::tensor(scores, torch::kDouble);
  auto y = torch::tensor(labels, torch::kLong);
  auroc.update(s.narrow(0, begin[r], length[r]),
               y.narrow(0, begin[r], length[r]));
  const double got = value(auroc.compute());
  // The union of the shards that exist at this world size.
  const auto held = static_cast<size_t>(std::min<int64_t>(12, begin[static_cast<size_t>(pg.world_size() - 1)] +
                                                                  length[static_cast<size_t>(pg.world_size() - 1)]));
  std::vector<double> us(scores.begin(), scores.begin() + held);
  std::vector<int64_t> uy(labels.begin(), labels.begin() + held);
  EXPECT_NEAR(got, binary_auroc(torch::tensor(us, torch::kDouble), torch::tensor(uy, torch::kLong)), 1e-12);
  EXPECT_NEAR(got, mann_whitney_auroc(us, uy), 1e-12);
  if (pg.world_size() > 1) EXPECT_EQ(auroc.last_sync().all_gather, 2);
}

TEST(DistributedMetrics, StateSavedMidEpochRestoresTheSameValue) {
  auto& pg = group();
  torch::manual_seed(100 + pg.rank());  // each rank its own data
  auto preds = torch::randint(0, 5, {60 + 10 * pg.rank()}, torch::kLong);
  auto target = torch::randint(0, 5, {60 + 10 * pg.rank()}, torch::kLong);
  auto scores = torch::rand({60 + 10 * pg.rank()}, torch::kDouble);
  auto make = [] {
    MetricCollection c;
    c.add("acc", std::make_shared<Accuracy>(ClassificationOptions(5).top_k(1)));
    c.add("recall", std::make_shared<Recall>(ClassificationOptions(5)));
    c.add("cm", std::make_shared<ConfusionMatrix>(ClassificationOptions(5)));
    c.add("max", std::make_shared<Max>());
    c.add("auroc", std::make_shared<AUROC>());
    return c;
  };
  auto feed = [&](MetricCollection& c, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i += 10) {
      auto p = preds.narrow(0, i, 10), t = target.narrow(0, i, 10), s = scores.narrow(0, i, 10);
      dynamic_cast<Accuracy&>(c.at("acc")).update(p, t);
      dynamic_cast<Recall&>(c.at("recall")).update(p, t);
      dynamic_cast<ConfusionMatrix&>(c.at("cm")).update(p, t);
      dynamic_cast<Max&>(c.at("max")).update(s);
      dynamic_cast<AUROC&>(c.at("auroc")).update(s, t.remainder(2));
    }
  };
  const int64_t n = preds.size(0);
  auto whole = make();
  feed(whole, 0, n);
  auto expected = whole.compute();
  auto first = make();
  feed(first, 0, 30);
  auto saved = torch::pickle_save(c10::IValue(first.state()));  // this rank's shard of the state
  auto second = make();
  c10::Dict<std::string, torch::Tensor> loaded;
  for (const auto& e : torch::pickle_load(saved).toGenericDict()) {
    loaded.insert(e.key().toStringRef(), e.value().toTensor());
  }
  second.load_state(loaded);
  feed(second, 30, n);
  auto got = second.compute();
  for (const auto& e : expected) EXPECT_TRUE(torch::equal(got.at(e.first), e.second)) << e.first;
  // Hand check of the pooled count: sum over ranks of 60 + 10 r.
  const int64_t w = pg.world_size();
  EXPECT_EQ(got.at("cm").sum().item<int64_t>(), 60 * w + 10 * w * (w - 1) / 2);
}

TEST(DistributedMetrics, CollectionUsesOneAllReduceForAllDecomposableMetrics) {
  auto& pg = group();
  const int64_t w = pg.world_size(), r = pg.rank();
  MetricCollection c;
  auto sum = c.add("sum", std::make_shared<Sum>());
  auto mean = c.add("mean", std::make_shared<Mean>());
  auto mn = c.add("min", std::make_shared<Min>());
  auto mx = c.add("max", std::make_shared<Max>());
  auto acc = c.add("acc", std::make_shared<Accuracy>(ClassificationOptions(4)));
  auto cm = c.add("cm", std::make_shared<ConfusionMatrix>(ClassificationOptions(4)));
  auto prec = c.add("precision", std::make_shared<Precision>(ClassificationOptions(4)));
  auto rec = c.add("recall", std::make_shared<Recall>(ClassificationOptions(4).average(Average::kMicro)));
  auto f1 = c.add("f1", std::make_shared<F1>(ClassificationOptions(4)));
  auto top2 = c.add("top2", std::make_shared<Accuracy>(ClassificationOptions(4).top_k(2)));
  // Rank r passes the value r + 1 and one sample of class r % 4 predicted right.
  sum->update(static_cast<double>(r + 1));
  mean->update(static_cast<double>(r + 1));
  mn->update(static_cast<double>(r + 1));
  mx->update(static_cast<double>(r + 1));
  auto label = torch::full({1}, r % 4, torch::kLong);
  acc->update(label, label);
  cm->update(label, label);
  prec->update(label, label);
  rec->update(label, label);
  f1->update(label, label);
  top2->update(torch::nn::functional::one_hot(label, 4).to(torch::kDouble), label);
  auto values = c.compute();
  EXPECT_EQ(c.last_sync().all_reduce, w > 1 ? 1 : 0);  // ten metrics, one all_reduce
  EXPECT_EQ(c.last_sync().all_gather, 0);
  EXPECT_EQ(value(values.at("sum")), static_cast<double>(w * (w + 1) / 2));
  EXPECT_EQ(value(values.at("mean")), static_cast<double>(w + 1) / 2);
  EXPECT_EQ(value(values.at("min")), 1.0);
  EXPECT_EQ(value(values.at("max")), static_cast<double>(w));
  EXPECT_EQ(value(values.at("acc")), 1.0);
  EXPECT_EQ(values.at("cm").sum().item<int64_t>(), w);
  EXPECT_EQ(values.at("cm").trace().item<int64_t>(), w);
  EXPECT_EQ(value(values.at("precision")), 1.0);
  EXPECT_EQ(value(values.at("recall")), 1.0);
  EXPECT_EQ(value(values.at("f1")), 1.0);
  EXPECT_EQ(value(values.at("top2")), 1.0);
  // The same metrics reduced one by one cost one all_reduce each.
  int64_t separate = 0;
  for (const char* name : {"sum", "mean", "min", "max", "acc", "cm", "precision", "recall", "f1", "top2"}) {
    auto v = c.at(name).compute();
    EXPECT_TRUE(torch::equal(v, values.at(name))) << name;
    separate += c.at(name).last_sync().all_reduce;
  }
  EXPECT_EQ(separate, w > 1 ? 10 : 0);
}
