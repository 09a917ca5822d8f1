// rankwise-test-nproc: 3
// load_collective() and CheckpointManager::load_latest_collective(): every
// rank gets the checkpoint rank 0 reads, whatever its own view of the path.
// Each rank works in a directory of its own and names files by relative
// paths, so that the same path shows each rank another file, as the nodes of
// a job see a network filesystem with stale caches, or node-local disks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/manager.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace fs = std::filesystem;

namespace {

rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}

// This rank's own working directory for test `name`, made the current one.
// Its parent is shared by the run's ranks (the store's port is unique per run).
fs::path enter_own_dir(const std::string& name) {
  const auto base = fs::temp_directory_path() /
                    ("rankwise_mp_cload_" + *rankwise::get_env("MASTER_PORT") + "_" + name);
  const auto mine = base / ("rank" + std::to_string(group().rank()));
  fs::remove_all(mine);
  fs::create_directories(mine);
  fs::current_path(mine);
  return base;
}

rankwise::checkpoint::Checkpoint state_of(int64_t step) {
  rankwise::checkpoint::Checkpoint state;
  state.insert("weights", torch::arange(1000, torch::kFloat32) * static_cast<double>(step));
  state.insert("step", step);
  return state;
}

void expect_step(const rankwise::checkpoint::Checkpoint& loaded, int64_t step) {
  EXPECT_EQ(loaded.at("step").toInt(), step) << "rank " << group().rank();
  EXPECT_TRUE(torch::equal(loaded.at("weights").toTensor(), state_of(step).at("weights").toTensor()))
      << "rank " << group().rank();
}

// Writes `bytes` to `path` in two halves with a pause between: a reader sees a torn file.
void write_slowly(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  out.flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  out.write(bytes.data() + bytes.size() / 2, static_cast<std::streamsize>(bytes.size() - bytes.size() / 2));
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// Ranks 1 and 2 do not see the file at all (node-local disks): rank 0 sends it.
TEST(CollectiveLoad, RanksThatDoNotSeeTheFileReceiveRankZerosBytes) {
  auto& pg = group();
  enter_own_dir("missing");
  rankwise::checkpoint::save("c.pt", state_of(7));  // rank 0 writes into its own directory
  pg.barrier();
  EXPECT_EQ(fs::exists("c.pt"), pg.rank() == 0);
  testing::internal::CaptureStderr();
  const auto started = std::chrono::steady_clock::now();
  const auto loaded = rankwise::checkpoint::load_collective(
      "c.pt", rankwise::checkpoint::CollectiveLoadOptions().stale_timeout(std::chrono::milliseconds(300)));
  const auto waited = std::chrono::steady_clock::now() - started;
  const std::string note = testing::internal::GetCapturedStderr();
  expect_step(loaded, 7);
  if (pg.rank() == 0) {
    EXPECT_NE(note.find("ranks 1, 2 did not see checkpoint 'c.pt' as rank 0 reads it"),
              std::string::npos)
        << note;
    EXPECT_NE(note.find("rank 0 sends them its bytes"), std::string::npos) << note;
    EXPECT_NE(note.find("cannot open checkpoint"), std::string::npos) << note;
  }
  // node_local: no wait at all (a bound far below the default 10 s).
  const auto again_started = std::chrono::steady_clock::now();
  expect_step(rankwise::checkpoint::load_collective("c.pt", rankwise::checkpoint::CollectiveLoadOptions().node_local(true)), 7);
  EXPECT_LT(std::chrono::steady_clock::now() - again_started, std::chrono::seconds(5));
  EXPECT_LT(waited, std::chrono::seconds(30));
}

// Rank 1 sees an older checkpoint at the path and rank 2 a torn copy, each
// replaced by rank 0's file a moment later (a network filesystem's stale
// view): both wait and read their own copy, verified; nothing is sent.
TEST(CollectiveLoad, AStaleOrTornViewIsWaitedForAndReadLocally) {
  auto& pg = group();
  const auto base = enter_own_dir("stale");
  rankwise::checkpoint::save("older.pt", state_of(2));  // rank 0 writes both
  rankwise::checkpoint::save("c.pt", state_of(3));
  pg.barrier();
  const auto rank0_file = base / "rank0" / "c.pt";
  std::thread catch_up;
  if (pg.rank() != 0) {
    // What this rank sees first: rank 1 an older checkpoint (step 2, written by
    // copying a file rank 0 made earlier), rank 2 the first half of rank 0's file.
    const std::string bytes = read_all(rank0_file);
    if (pg.rank() == 1) {
      fs::copy_file(base / "rank0" / "older.pt", "c.pt", fs::copy_options::overwrite_existing);
    } else {
      std::ofstream("c.pt", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    }
    catch_up = std::thread([bytes, rank = pg.rank()] {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      if (rank == 1) {
        std::ofstream("c.pt.new", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        fs::rename("c.pt.new", "c.pt");  // atomic, as a writer's rename reaches the client
      } else {
        write_slowly("c.pt", bytes);  // torn for a while
      }
    });
  }
  testing::internal::CaptureStderr();
  const auto loaded = rankwise::checkpoint::load_collective(
      "c.pt", rankwise::checkpoint::CollectiveLoadOptions().stale_timeout(std::chrono::seconds(20)));
  const std::string note = testing::internal::GetCapturedStderr();
  if (catch_up.joinable()) catch_up.join();
  expect_step(loaded, 3);
  EXPECT_EQ(note.find("sends them its bytes"), std::string::npos) << note;
}

// Rank 0 cannot read the file: every rank raises its error, naming the file.
TEST(CollectiveLoad, RankZerosErrorIsRaisedOnEveryRank) {
  auto& pg = group();
  enter_own_dir("error");
  if (pg.rank() != 0) std::ofstream("c.pt") << "not a checkpoint";  // rank 0 has no file
  try {
    rankwise::checkpoint::load_collective("c.pt");
    FAIL() << "rank " << pg.rank() << ": no error";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open checkpoint 'c.pt'"), std::string::npos)
        << e.what();
    if (pg.rank() != 0) {
      EXPECT_NE(std::string(e.what()).find("raised on rank 0"), std::string::npos) << e.what();
    }
  }
  pg.barrier();
}

// The manager: rank 0's latest (step 20) on every rank, though rank 1's view
// of the directory stops at step 10 and rank 2 has no directory.
TEST(CollectiveLoad, ManagerLoadsRankZerosLatestOnEveryRank) {
  auto& pg = group();
  const auto base = enter_own_dir("manager");
  rankwise::checkpoint::CheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions("ckpts"));
  manager.save(state_of(10), 10);
  if (pg.rank() == 1) fs::copy(base / "rank0" / "ckpts", "ckpts");  // a view that stops here
  pg.barrier();
  manager.save(state_of(20), 20);
  std::string path;
  const auto loaded = manager.load_latest_collective(
      &path, rankwise::checkpoint::CollectiveLoadOptions().stale_timeout(std::chrono::milliseconds(200)));
  ASSERT_TRUE(loaded.has_value());
  expect_step(*loaded, 20);
  EXPECT_EQ(path, "ckpts/checkpoint-0000000020.pt");
  // What each rank's own latest() would have said: three different answers.
  const auto own = pg.rank() == 2 ? std::optional<std::string>() : manager.latest();
  if (pg.rank() == 1) EXPECT_EQ(own, "ckpts/checkpoint-0000000010.pt");
}
