// rankwise-test-nproc: 1 2 3
//
// rankwise::monitor::ProgressBar over ranks: its values are reduced over every
// rank (sums, then divided once) and the same on every rank, samples/s
// included (rank 0's seconds travel in the reduction); only rank 0 prints;
// and a MetricsLog beside it is written by rank 0 only.
#include <gtest/gtest.h>

#include <thread>
#include <torch/types.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "rankwise/monitor/metrics_log.h"
#include "rankwise/monitor/progress_bar.h"
#include "rankwise/dist/process_group.h"

namespace {
using namespace rankwise::monitor;

rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}

TEST(ProgressOverRanks, ValuesAreReducedOverEveryRankAndTheSameEverywhere) {
  auto& pg = group();
  const int r = pg.rank(), w = pg.world_size();
  const auto began = std::chrono::steady_clock::now();
  ProgressBar p(ProgressBarOptions().style(ProgressBarStyle::kOff).every_n_steps(2));
  p.start_epoch(1, 1, 3);
  // Rank r: 2 steps of r + 1 samples with mean loss r (dyadic: exact sums).
  EXPECT_FALSE(p.update(r + 1, torch::tensor(static_cast<double>(r))));
  EXPECT_TRUE(p.update(r + 1, torch::tensor(static_cast<double>(r))));
  double loss_sum = 0, samples = 0;  // sum over k of 2 (k + 1) k, and of 2 (k + 1)
  for (int k = 0; k < w; ++k) {
    loss_sum += 2.0 * (k + 1) * k;
    samples += 2.0 * (k + 1);
  }
  EXPECT_DOUBLE_EQ(p.loss(), loss_sum / samples);  // w=3: 16 / 12
  EXPECT_GT(p.samples_per_second(), 0);
  auto mine = torch::tensor({p.samples_per_second(), p.loss()}, torch::kFloat64);
  for (const auto& other : pg.all_gather(mine)) {
    EXPECT_EQ(other[0].item<double>(), p.samples_per_second());  // bit for bit: rank 0's clock everywhere
    EXPECT_EQ(other[1].item<double>(), p.loss());
  }
  // Per-rank statistics: one per rank, in rank order, the same everywhere.
  ASSERT_EQ(p.rank_stats().size(), static_cast<std::size_t>(w));
  // Each rank's wait and compute times are parts of the time it has run.
  auto elapsed = torch::tensor(
      {std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count()},
      torch::kFloat64);
  pg.all_reduce(elapsed, rankwise::dist::ReduceOp::kMax);
  for (int k = 0; k < w; ++k) {
    const auto& s = p.rank_stats()[static_cast<std::size_t>(k)];
    EXPECT_EQ(s.rank, k);
    EXPECT_GT(s.samples_per_s, 0);
    EXPECT_GE(s.wait_ms, 0);
    EXPECT_GE(s.compute_ms, 0);
    EXPECT_LE(s.wait_ms + s.compute_ms, elapsed.item<double>()) << "rank " << k;
    auto stats = torch::tensor({s.samples_per_s, s.wait_ms, s.compute_ms}, torch::kFloat64);
    for (const auto& other : pg.all_gather(stats)) EXPECT_TRUE(torch::equal(other, stats)) << "rank " << k;
  }
  // The third step is pending: end_epoch reduces it on every rank.
  p.update(r + 1, torch::tensor(1.0));
  EXPECT_TRUE(p.end_epoch());
  EXPECT_DOUBLE_EQ(p.loss(), 1.0);
}

// The collectives between two reductions count as this rank's wait: a rank
// that sleeps before a barrier makes the others wait about that long.
TEST(ProgressOverRanks, TheRankOthersWaitForWaitsLeast) {
  auto& pg = group();
  if (pg.world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  ProgressBar p(ProgressBarOptions().style(ProgressBarStyle::kOff).every_n_steps(2));
  p.start_epoch(1, 1, 2);
  for (int step = 0; step < 2; ++step) {
    if (pg.rank() == pg.world_size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    pg.barrier();
    p.update(1);
  }
  const auto& stats = p.rank_stats();
  const auto& slow = stats.back();
  for (int k = 0; k + 1 < pg.world_size(); ++k) {
    // Each other rank waited ~200 ms per step in the barrier; the slow one computed them.
    EXPECT_GT(stats[static_cast<std::size_t>(k)].wait_ms, 150) << "rank " << k;
    EXPECT_GT(stats[static_cast<std::size_t>(k)].wait_ms, slow.wait_ms + 100) << "rank " << k;
  }
  EXPECT_GT(slow.compute_ms, 150);
}

TEST(ProgressOverRanks, OnlyRankZeroPrints) {
  auto& pg = group();
  ProgressBar p(ProgressBarOptions().style(ProgressBarStyle::kLines).every_n_steps(1).line_interval(std::chrono::milliseconds(0)));
  ::testing::internal::CaptureStdout();
  p.start_epoch(1, 1, 2);
  p.update(4, torch::tensor(0.5));
  p.update(4, torch::tensor(0.5));
  p.end_epoch();
  const std::string out = ::testing::internal::GetCapturedStdout();
  if (pg.rank() == 0) {
    EXPECT_NE(out.find("progress: epoch 1 of 1, step 2/2 (100%) | "), std::string::npos) << out;
  } else {
    EXPECT_EQ(out, "");
  }
}

TEST(ProgressOverRanks, MetricsLogIsWrittenByRankZeroOnly) {
  auto& pg = group();
  // One path for every rank: rank 0's pid, broadcast.
  auto pid = torch::tensor({static_cast<int64_t>(::getpid())}, torch::kInt64);
  pg.broadcast(pid, 0);
  const std::string path = ::testing::TempDir() + "rankwise_mp_metrics_" + std::to_string(pid.item<int64_t>()) + ".jsonl";
  {
    MetricsLog log(MetricsLogOptions(path), {{"ranks", int64_t{pg.world_size()}}});
    EXPECT_EQ(log.writing(), pg.rank() == 0);
    log.log_epoch(1, 10, {{"accuracy", 0.5}});
  }
  pg.barrier();
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);  // one config record and one epoch record, whatever the world size
  EXPECT_NE(lines[0].find("\"world_size\":" + std::to_string(pg.world_size())), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("{\"kind\":\"epoch\",\"step\":10,\"epoch\":1,", 0), 0u) << lines[1];
  pg.barrier();
  if (pg.rank() == 0) std::remove(path.c_str());
}

}  // namespace
