// rankwise-test-nproc: 3
// Replicated checkpoints on 3 ranks: nobody reads before rank 0's (slow)
// write is complete; a failure on rank 0 is raised on every rank; per-rank
// RNG and metric states come back to their own rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdlib.h>

#include <chrono>
#include <filesystem>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/training_state.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/dist/process_group.h"

namespace fs = std::filesystem;

namespace {

rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}

// A directory every rank of this run shares (the store's port is unique per run).
fs::path shared_dir(const std::string& name) {
  return fs::temp_directory_path() /
         ("rankwise_mp_ckpt_" + *rankwise::get_env("MASTER_PORT") + "_" + name);
}

}  // namespace

// Must run first in this binary: the fault knob is read at the first save.
TEST(ReplicatedCheckpoint, SlowRankZeroWriteIsCompleteBeforeAnyRankReturns) {
  auto& pg = group();
  const auto dir = shared_dir("slow");
  if (pg.rank() == 0) {
    fs::create_directories(dir);
    ::setenv("RANKWISE_CHECKPOINT_FAULT", "sleep_ms=1500", 1);  // rank 0 stalls mid-write
  }
  pg.barrier();
  rankwise::checkpoint::Checkpoint state;
  state.insert("payload", torch::arange(1 << 20, torch::kFloat32));
  const auto started = std::chrono::steady_clock::now();
  rankwise::checkpoint::save((dir / "a.pt").string(), state);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // The stall happened (rank 0's own clock: sleep_for waits at least 1.5 s).
  if (pg.rank() == 0) EXPECT_GE(waited, 1.5);
  // Every rank reads at once: the file, which appears whole by a rename at
  // the end of rank 0's write, must be there, complete, and verify. (No
  // duration on the other ranks: their clocks start at different times.)
  const bool written = fs::exists(dir / "a.pt");
  EXPECT_TRUE(written) << "rank " << pg.rank() << " returned before rank 0 finished writing";
  if (written) {
    EXPECT_TRUE(rankwise::checkpoint::verify((dir / "a.pt").string()));
    EXPECT_TRUE(torch::equal(rankwise::checkpoint::load((dir / "a.pt").string()).at("payload").toTensor(),
                             torch::arange(1 << 20, torch::kFloat32)));
  }
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}

TEST(ReplicatedCheckpoint, FailureOnRankZeroIsRaisedOnEveryRank) {
  auto& pg = group();
  rankwise::checkpoint::Checkpoint state;
  state.insert("x", torch::ones({2}));
  try {
    rankwise::checkpoint::save("/proc/rankwise-no-such-dir/a.pt", state);
    FAIL() << "no error on rank " << pg.rank();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("/proc/rankwise-no-such-dir/a.pt"), std::string::npos) << text;
    const std::string by = pg.rank() == 0 ? "(raised on rank 0"
                                          : "(rank 0's error, raised on rank " + std::to_string(pg.rank());
    EXPECT_NE(text.find(by + " for the save by rank 0)"), std::string::npos) << text;
  }
  pg.barrier();  // and nobody hangs: the next collective works
}

TEST(ReplicatedCheckpoint, PerRankRngAndMetricStatesReturnToTheirRank) {
  auto& pg = group();
  const auto dir = shared_dir("state");
  torch::manual_seed(1);
  torch::nn::Linear model(3, 2);  // the same replica on every rank
  torch::manual_seed(100 + pg.rank());  // ranks draw different random numbers from here on
  rankwise::metrics::MetricCollection metrics;
  auto mean = metrics.add("loss", std::make_shared<rankwise::metrics::Mean>());
  mean->update(static_cast<double>(10 * (pg.rank() + 1)), 2.0);  // rank-local partial state

  rankwise::checkpoint::TrainingState state;
  state.model = model.get();
  state.step = 7;
  state.metrics["train"] = &metrics;
  {
    rankwise::checkpoint::CheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(dir.string()));
    manager.save(rankwise::checkpoint::capture(state), state.step);
  }
  const auto expected_draw = torch::rand({4});
  const auto expected_loss = metrics.compute().at("loss").item<double>();  // collective
  EXPECT_DOUBLE_EQ(expected_loss, (10.0 + 20.0 + 30.0) * 2 / 6);

  torch::manual_seed(999);
  torch::nn::Linear fresh(3, 2);
  rankwise::metrics::MetricCollection fresh_metrics;
  fresh_metrics.add("loss", std::make_shared<rankwise::metrics::Mean>());
  rankwise::checkpoint::TrainingState target;
  target.model = fresh.get();
  target.metrics["train"] = &fresh_metrics;
  rankwise::checkpoint::CheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(dir.string()));
  auto checkpoint = manager.load_latest();
  ASSERT_TRUE(checkpoint.has_value());
  rankwise::checkpoint::restore(*checkpoint, target);
  EXPECT_EQ(target.step, 7);
  EXPECT_TRUE(torch::equal(fresh->weight, model->weight));
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected_draw)) << "rank " << pg.rank();
  const auto restored = fresh_metrics.state(), original = metrics.state();
  ASSERT_EQ(restored.size(), original.size());
  for (const auto& entry : original) {
    EXPECT_TRUE(torch::equal(restored.at(entry.key()), entry.value())) << entry.key();
  }
  EXPECT_DOUBLE_EQ(fresh_metrics.compute().at("loss").item<double>(), expected_loss);
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}
