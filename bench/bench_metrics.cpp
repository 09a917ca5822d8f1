// bench_metrics: the cost of computing 10 metrics across ranks with one
// MetricCollection (one all_reduce of one flat buffer) versus each metric
// reduced on its own (10 all_reduces).
//
// Run on 2 ranks:   rankwise-run --nproc-per-node 2 bench_metrics [iterations] [num_classes]
// (defaults 300 and 10). Rank 0 prints one line per variant and the ratio.
// Build: a plain executable linked to rankwise (rankwise_executable(bench_metrics
// bench_metrics.cpp) in bench/CMakeLists.txt); no Google Benchmark needed.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "rankwise/log.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/dist/process_group.h"

using namespace rankwise::metrics;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 300;
  const int64_t classes = argc > 2 ? std::max(2, std::atoi(argv[2])) : 10;
  auto& pg = rankwise::dist::init();

  MetricCollection collection;
  auto sum = collection.add("sum", std::make_shared<Sum>());
  auto mean = collection.add("mean", std::make_shared<Mean>());
  auto mn = collection.add("min", std::make_shared<Min>());
  auto mx = collection.add("max", std::make_shared<Max>());
  auto acc = collection.add("acc", std::make_shared<Accuracy>(ClassificationOptions(classes)));
  auto top5 = collection.add(
      "top5", std::make_shared<Accuracy>(ClassificationOptions(classes).top_k(std::min<int64_t>(5, classes))));
  auto cm = collection.add("cm", std::make_shared<ConfusionMatrix>(ClassificationOptions(classes)));
  auto prec = collection.add("precision", std::make_shared<Precision>(ClassificationOptions(classes)));
  auto rec = collection.add("recall", std::make_shared<Recall>(ClassificationOptions(classes)));
  auto f1 = collection.add("f1", std::make_shared<F1>(ClassificationOptions(classes)));

  torch::manual_seed(pg.rank());
  auto scores = torch::randn({1024, classes});
  auto target = torch::randint(0, classes, {1024}, torch::kLong);
  auto loss = torch::rand({1024}, torch::kDouble);
  sum->update(loss);
  mean->update(loss);
  mn->update(loss);
  mx->update(loss);
  acc->update(scores, target);
  top5->update(scores, target);
  cm->update(scores, target);
  prec->update(scores, target);
  rec->update(scores, target);
  f1->update(scores, target);

  using clock = std::chrono::steady_clock;
  auto time_us = [&](auto&& body) {
    std::vector<double> samples;
    for (int i = 0; i < iterations; ++i) {
      pg.barrier();  // start together, so the time is the collective's, not the wait
      const auto start = clock::now();
      body();
      samples.push_back(std::chrono::duration<double, std::micro>(clock::now() - start).count());
    }
    return median(samples);
  };
  // Warm-up (Gloo connections, allocations).
  for (int i = 0; i < 5; ++i) collection.compute();

  const double together = time_us([&] { collection.compute(); });
  const int64_t together_reduces = collection.last_sync().all_reduce;
  const double apart = time_us([&] {
    for (const char* name : {"sum", "mean", "min", "max", "acc", "top5", "cm", "precision", "recall", "f1"}) {
      collection.at(name).compute();
    }
  });

  rankwise::print0("bench_metrics: world {} | {} metrics, {} classes, median of {} iterations",
                   pg.world_size(), collection.size(), classes, iterations);
  rankwise::print0("  MetricCollection::compute   {:9.1f} us  ({} all_reduce)", together,
                   together_reduces);
  rankwise::print0("  each Metric::compute        {:9.1f} us  ({} all_reduce)", apart,
                   static_cast<int64_t>(collection.size()));
  rankwise::print0("  ratio separate / collection {:9.2f}x", apart / together);
  pg.barrier();
  return 0;
}
