// Asynchronous saves on 2 ranks: save_async returns while rank 0's write is
// still going, training's collectives run meanwhile, wait() publishes; a
// write that fails on rank 0 is raised on every rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/manager.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "support/file_size_limit.h"

namespace fs = std::filesystem;
using rankwise::checkpoint::Checkpoint;
using rankwise::checkpoint::CheckpointManager;
using rankwise::checkpoint::CheckpointManagerOptions;

namespace {

rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}

// A directory every rank of this run shares (the store's port is unique per run).
fs::path shared_dir(const std::string& name) {
  return fs::temp_directory_path() / ("rankwise_mp_async_" + *rankwise::get_env("MASTER_PORT") + "_" + name);
}

Checkpoint payload(int64_t step, int64_t floats) {
  Checkpoint c;
  c.insert("step", step);
  c.insert("payload", torch::full({floats}, static_cast<float>(step)));
  return c;
}

}  // namespace

// Must run first in this binary: the fault knob is read at the first save.
TEST(AsyncCheckpoint, SaveAsyncReturnsWhileRankZeroWritesAndWaitPublishes) {
  auto& pg = group();
  const auto dir = shared_dir("slow");
  // Rank 0's write stalls 2 s after its first bytes.
  if (pg.rank() == 0) ::setenv("RANKWISE_CHECKPOINT_FAULT", "sleep_ms=2000", 1);
  CheckpointManager manager(CheckpointManagerOptions(dir.string()));
  const std::string path = manager.save_async(payload(1, 1 << 20), 1);
  // Training goes on: collectives on this thread while rank 0's thread writes.
  for (int i = 0; i < 20; ++i) {
    auto t = torch::full({4}, static_cast<float>(pg.rank() + i));
    pg.all_reduce(t);
    ASSERT_TRUE(torch::equal(t, torch::full({4}, static_cast<float>(1 + 2 * i))));
  }
  if (pg.rank() == 0) {  // its write is stalled: nothing is published yet
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(manager.latest().has_value());
    EXPECT_LT(manager.last_timings().blocked_ms, 2000);
  }
  manager.wait();
  EXPECT_EQ(manager.latest(), path) << "rank " << pg.rank();
  EXPECT_TRUE(rankwise::checkpoint::verify(path));
  if (pg.rank() == 0) EXPECT_GT(manager.last_timings().waited_ms, 0);
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}

TEST(AsyncCheckpoint, AFailedWriteOnRankZeroIsRaisedOnEveryRank) {
  auto& pg = group();
  const auto dir = shared_dir("full");
  CheckpointManager manager(CheckpointManagerOptions(dir.string()));
  manager.save_async(payload(1, 16), 1);
  std::optional<rankwise::test::FileSizeLimit> full;  // a full disk for rank 0's write
  if (pg.rank() == 0) full.emplace(64 << 10);
  const std::string failed = manager.save_async(payload(2, 1 << 18), 2);
  try {
    manager.save_async(payload(3, 16), 3);
    ADD_FAILURE() << "no error on rank " << pg.rank();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("the asynchronous save of '" + failed + "' failed"), std::string::npos) << text;
    if (pg.rank() != 0) {
      EXPECT_NE(text.find("(rank 0's error, raised on rank 1 for the asynchronous save by rank 0)"), std::string::npos) << text;
    }
  }
  full.reset();
  EXPECT_EQ(manager.load_latest()->at("step").toInt(), 1) << "rank " << pg.rank();
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}
