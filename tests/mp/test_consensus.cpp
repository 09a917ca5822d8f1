// rankwise-test-nproc: 2
//
// Agreed decisions: every rank gets the same answer, and a training loop that
// stops early on the reduced metric ends on every rank in the same epoch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <vector>

#include "rankwise/dist/consensus.h"
#include "rankwise/error.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/dist/process_group.h"

namespace {
rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}
}  // namespace

TEST(Consensus, AnyAllBroadcastAgree) {
  auto& pg = group();
  ASSERT_EQ(pg.world_size(), 2);
  const bool mine = pg.rank() == 1;  // true on rank 1 only
  EXPECT_TRUE(rankwise::dist::any(mine));
  EXPECT_FALSE(rankwise::dist::all(mine));
  EXPECT_TRUE(rankwise::dist::all(true));
  EXPECT_FALSE(rankwise::dist::any(false));
  EXPECT_EQ(rankwise::dist::broadcast_decision(mine, 1), true);
  EXPECT_EQ(rankwise::dist::broadcast_decision(mine, 0), false);
  EXPECT_EQ(rankwise::dist::broadcast_decision(int64_t{10 + pg.rank()}), 10);
  EXPECT_EQ(rankwise::dist::broadcast_decision(0.25 * (pg.rank() + 1), 1), 0.5);
}

// Per-rank validation losses (one sample of weight 1 per rank and epoch;
// dyadic values, so every sum is exact). Epochs are numbered from 0.
//   rank 0: 1.0 1.25 1.5 1.75 2.0 ...  alone: best at 0, stops at 2 (patience 2)
//   rank 1: 1.0 0.5 0.25 0.375 0.5 ... alone: best at 2, stops at 4
//   mean:   1.0 0.875 0.875 1.0625 1.25: best at 1, 0.875 is no improvement
//           at 2 (wait 1), wait 2 at 3 -> every rank stops at epoch 3.
const std::vector<std::vector<double>> kLoss{
    {1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75},
    {1.0, 0.5, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875}};

TEST(Consensus, EarlyStoppingOnTheReducedMetricStopsEveryRankTogether) {
  auto& pg = group();
  ASSERT_EQ(pg.world_size(), 2);
  const auto& mine = kLoss[static_cast<size_t>(pg.rank())];
  // Rank-local decisions (verify_agreement off: no communication) disagree.
  rankwise::dist::EarlyStopping local(rankwise::dist::EarlyStoppingOptions().patience(2).verify_agreement(false));
  int64_t local_stop = -1;
  for (size_t e = 0; e < mine.size() && local_stop < 0; ++e) {
    if (local.step(mine[e])) local_stop = static_cast<int64_t>(e);
  }
  EXPECT_EQ(local_stop, pg.rank() == 0 ? 2 : 4);

  // The training loop: a collective every epoch (as DDP's gradient all_reduce
  // would be), the reduced loss decides.
  rankwise::dist::EarlyStopping stopper(rankwise::dist::EarlyStoppingOptions().patience(2));
  int64_t epoch = 0;
  for (; epoch < static_cast<int64_t>(mine.size()); ++epoch) {
    auto step = torch::ones({1});
    pg.all_reduce(step);  // the "training step": would hang if ranks diverged
    rankwise::metrics::Mean val_loss;
    val_loss.update(mine[static_cast<size_t>(epoch)], 1.0);
    if (stopper.step(val_loss.compute().item<double>())) break;
  }
  EXPECT_EQ(epoch, 3);
  EXPECT_EQ(stopper.stopped_epoch(), 3);
  EXPECT_EQ(stopper.best(), 0.875);
  // Both ranks stopped in the same epoch: agree, then meet at a barrier.
  EXPECT_EQ(rankwise::dist::broadcast_decision(epoch, 0), epoch);
  pg.barrier();
}

TEST(Consensus, EarlyStoppingRefusesRankLocalValues) {
  auto& pg = group();
  rankwise::dist::EarlyStopping stopper(rankwise::dist::EarlyStoppingOptions().patience(2));
  try {
    stopper.step(kLoss[static_cast<size_t>(pg.rank())][1]);  // 1.25 vs 0.5
    FAIL() << "expected CollectiveMismatchError";
  } catch (const rankwise::CollectiveMismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("different values"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(stopper.step(1.0));  // the same value everywhere is fine
  pg.barrier();
}
