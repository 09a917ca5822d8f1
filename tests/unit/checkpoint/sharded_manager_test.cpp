// ShardedCheckpointManager (rankwise/checkpoint/sharded_manager.h): numbered
// sharded checkpoints with `latest` and retention, in one process and through
// rankwise-run with tests/programs/torch_sharded_manager, including ranks
// killed (SIGKILL, the fault knob of checkpoint/detail/fault_injection.h)
// during a save, and asynchronous saves (save_async) on several ranks: the
// same bytes, kills at each point, a full disk on one rank, node-local disks.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/sharded_manager.h"
#include "rankwise/error.h"
#include "support/shell.h"
#include "support/workers.h"

namespace fs = std::filesystem;
using rankwise::test::shell;

namespace {

const std::string kRun = RANKWISE_RUN_PATH;
const std::string kWorker = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_sharded_manager";

fs::path fresh_dir(const std::string& name) { return rankwise::test::fresh_dir("rankwise_sharded_manager", name); }
using rankwise::test::count;

std::string run_worker(int nproc, const std::string& args) {
  return rankwise::test::run_launched(kRun, nproc, kWorker, args);
}

// The names in `dir`, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

rankwise::checkpoint::ShardedState one_rank_state(double value) {
  rankwise::checkpoint::ShardedState state;
  state.emplace("w", rankwise::checkpoint::shard_rows(at::full({4}, value, at::kFloat), 0, 1));
  return state;
}

}  // namespace

TEST(ShardedCheckpointManager, KeepsExactlyTheLastKAndResumesFromLatestAtAnotherWorldSize) {
  const auto root = fresh_dir("retention") / "ckpts";
  const auto saved = run_worker(2, "save " + root.string() + " 1 5 2");
  ASSERT_NE(saved.find("exit=0"), std::string::npos) << saved;
  EXPECT_EQ(count(saved, "saved step 5"), 2) << saved;
  EXPECT_EQ(names_in(root), (std::vector<std::string>{"checkpoint-0000000400", "checkpoint-0000000500", "latest",
                                                      "rankwise.lock"}));
  EXPECT_EQ(read(root / "latest"), "checkpoint-0000000500\n");
  const auto loaded = run_worker(3, "load " + root.string());
  EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
  EXPECT_EQ(count(loaded, "loaded step 5, values ok"), 3) << loaded;
  // keep_last 1 on the next saves: exactly one remains.
  const auto more = run_worker(2, "save " + root.string() + " 6 7 1");
  ASSERT_NE(more.find("exit=0"), std::string::npos) << more;
  EXPECT_EQ(names_in(root), (std::vector<std::string>{"checkpoint-0000000700", "latest", "rankwise.lock"}));
  fs::remove_all(root.parent_path());
}

// Node-local disks simulated on one machine (the worker's NODE_ROOT RANKS_PER_NODE arguments: each
// simulated node works in NODE_ROOT/node<k>, so the relative ROOT is another directory per node).
TEST(ShardedCheckpointManager, NodeLocalDisksEachKeepTheirOwnLatestAndRetention) {
  const auto disks = fresh_dir("node_local");
  const auto saved = run_worker(4, "save ckpts 1 3 2 " + disks.string() + " 2");
  ASSERT_NE(saved.find("exit=0"), std::string::npos) << saved;
  EXPECT_EQ(count(saved, "saved step 3"), 4) << saved;
  for (const char* node : {"node0", "node1"}) {
    const auto root = disks / node / "ckpts";
    const std::vector<std::string> expected =
        std::string(node) == "node0"
            ? std::vector<std::string>{"checkpoint-0000000200", "checkpoint-0000000300", "latest", "rankwise.lock"}
            : std::vector<std::string>{"checkpoint-0000000200", "checkpoint-0000000300", "latest"};
    EXPECT_EQ(names_in(root), expected) << node;
    EXPECT_EQ(read(root / "latest"), "checkpoint-0000000300\n") << node;
  }
  EXPECT_TRUE(fs::exists(disks / "node0/ckpts/checkpoint-0000000300/__1_0.distcp"));
  EXPECT_FALSE(fs::exists(disks / "node0/ckpts/checkpoint-0000000300/__2_0.distcp"));
  EXPECT_TRUE(fs::exists(disks / "node1/ckpts/checkpoint-0000000300/__3_0.distcp"));
  // Resumed as 2 nodes of 2 ranks, and as 2 nodes of 1 rank (each lacks the other node's files).
  for (const auto& [world, per_node] : {std::pair{4, 2}, std::pair{2, 1}}) {
    const auto loaded =
        run_worker(world, "load ckpts " + disks.string() + " " + std::to_string(per_node));
    EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
    EXPECT_EQ(count(loaded, "loaded step 3, values ok"), world) << loaded;
  }
  fs::remove_all(disks);
}

TEST(ShardedCheckpointManager, ARankKilledDuringASaveLeavesThePreviousLatestLoadable) {
  const auto logs = fresh_dir("kill");
  const auto root = logs / "ckpts";
  ASSERT_NE(run_worker(2, "save " + root.string() + " 1 2 3").find("exit=0"), std::string::npos);
  // Rank 1 dies at the first byte of its data file of step 3.
  const auto out = rankwise::test::run_by_hand(kWorker, 2, 1, "kill_at_byte=1", "save " + root.string() + " 3 3 3", logs);
  EXPECT_NE(out[0].find("rank 0: error: rankwise: rank 0/2: save_sharded"), std::string::npos) << out[0];
  EXPECT_NE(out[0].find("Nothing was published"), std::string::npos) << out[0];
  EXPECT_EQ(out[0].find("saved step 3"), std::string::npos) << out[0];
  EXPECT_EQ(read(root / "latest"), "checkpoint-0000000200\n");
  EXPECT_FALSE(fs::exists(root / "checkpoint-0000000300"));
  const auto loaded = run_worker(3, "load " + root.string());
  EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
  EXPECT_EQ(count(loaded, "loaded step 2, values ok"), 3) << loaded;
  fs::remove_all(logs);
}

TEST(ShardedCheckpointManager, RankZeroKilledBeforeThePointerMovesLeavesThePreviousLatest) {
  const auto logs = fresh_dir("kill_latest");
  const auto root = logs / "ckpts";
  ASSERT_NE(run_worker(2, "save " + root.string() + " 1 2 3").find("exit=0"), std::string::npos);
  // Step 3 is published whole, then rank 0 dies before `latest` moves.
  const auto out =
      rankwise::test::run_by_hand(kWorker, 2, 0, "kill_at=before-latest", "save " + root.string() + " 3 3 3", logs);
  EXPECT_NE(out[1].find("rank 1: error:"), std::string::npos) << out[1];
  EXPECT_TRUE(fs::exists(root / "checkpoint-0000000300" / ".metadata"));
  EXPECT_EQ(read(root / "latest"), "checkpoint-0000000200\n");
  const auto loaded = run_worker(2, "load " + root.string());
  EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
  EXPECT_EQ(count(loaded, "loaded step 2, values ok"), 2) << loaded;
  fs::remove_all(logs);
}

TEST(ShardedCheckpointManager, RankZeroKilledBeforePublishingLeavesNoLeftoverForTheNextRun) {
  const auto logs = fresh_dir("kill_publish");
  const auto root = logs / "ckpts";
  ASSERT_NE(run_worker(2, "save " + root.string() + " 1 1 3").find("exit=0"), std::string::npos);
  rankwise::test::run_by_hand(kWorker, 2, 0, "kill_at=before-publish", "save " + root.string() + " 2 2 3", logs);
  EXPECT_EQ(shell("ls -a " + root.string() + " | grep -c rankwise-tmp"), "1\n");  // the killed save's
  const auto loaded = run_worker(2, "load " + root.string());
  EXPECT_EQ(count(loaded, "loaded step 1, values ok"), 2) << loaded;
  EXPECT_EQ(shell("ls -a " + root.string() + " | grep -c rankwise-tmp"), "0\n");  // removed by the next manager
  fs::remove_all(logs);
}

TEST(ShardedCheckpointManager, AnEmptyDirectoryLoadsNothingOnEveryRank) {
  const auto root = fresh_dir("empty") / "ckpts";
  const auto loaded = run_worker(2, "load " + root.string());
  EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
  EXPECT_EQ(count(loaded, "loaded none"), 2) << loaded;
  fs::remove_all(root.parent_path());
}

TEST(ShardedCheckpointManager, LatestFallsBackPastAnIncompleteOrMissingPointer) {
  const auto root = fresh_dir("fallback");
  rankwise::checkpoint::ShardedCheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(root.string()).keep_last(5));
  for (int s = 1; s <= 3; ++s) manager.save(one_rank_state(s), s);
  EXPECT_EQ(manager.latest(), (root / "checkpoint-0000000003").string());
  // Truncating step 3's data file: latest falls back to step 2.
  fs::resize_file(root / "checkpoint-0000000003" / "__0_0.distcp", 10);
  EXPECT_EQ(manager.latest(), (root / "checkpoint-0000000002").string());
  // No pointer: the highest-numbered complete one, noted on stderr.
  fs::remove(root / "latest");
  testing::internal::CaptureStderr();
  EXPECT_EQ(manager.latest(), (root / "checkpoint-0000000002").string());
  const std::string note = testing::internal::GetCapturedStderr();
  EXPECT_NE(note.find("'" + root.string() + "/latest' is missing; using " +
                      (root / "checkpoint-0000000002").string() + ", the newest checkpoint that verifies"),
            std::string::npos)
      << note;
  auto state = one_rank_state(0);
  EXPECT_EQ(manager.load_latest_collective(state), (root / "checkpoint-0000000002").string());
  EXPECT_TRUE(at::equal(std::get<rankwise::checkpoint::ShardedTensor>(state.at("w")).chunks()[0].data, at::full({4}, 2.0f)));
  // A damaged .metadata too: none is complete.
  fs::remove_all(root / "checkpoint-0000000001");
  std::ofstream(root / "checkpoint-0000000002" / ".metadata", std::ios::app) << "x";
  try {
    manager.latest();
    ADD_FAILURE() << "no error";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("none of its 2 checkpoint directories verifies"), std::string::npos)
        << e.what();
  }
  fs::remove_all(root);
}

// A plain save_sharded (or save) into a directory a manager keeps works (a
// final model beside the checkpoints) but removes nothing there: its lock
// does not exclude the manager, whose save in progress would look like a
// killed one's leftovers (it once deleted one).
TEST(ShardedCheckpointManager, APlainSaveIntoItsDirectoryLeavesItsTemporariesAlone) {
  const auto root = fresh_dir("plain");
  {
    rankwise::checkpoint::ShardedCheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(root.string()));
    manager.save(one_rank_state(1), 5);
    fs::create_directory(root / "checkpoint-0000000006.rankwise-tmp.Ab12Cd");  // as a save in progress has
    std::ofstream(root / "final.pt.tmp.77.Ab12Cd") << "as a save in progress has";
    rankwise::checkpoint::save_sharded((root / "checkpoint-0000000006").string(), one_rank_state(2));
    rankwise::checkpoint::Checkpoint plain;
    plain.insert("x", 1);
    rankwise::checkpoint::save((root / "final.pt").string(), plain);
    EXPECT_TRUE(fs::exists(root / "checkpoint-0000000006.rankwise-tmp.Ab12Cd"));
    EXPECT_TRUE(fs::exists(root / "final.pt.tmp.77.Ab12Cd"));
    EXPECT_TRUE(rankwise::checkpoint::verify((root / "final.pt").string()));
  }
  // The next manager, holding the directory's lock, removes them.
  rankwise::checkpoint::ShardedCheckpointManager next(rankwise::checkpoint::CheckpointManagerOptions(root.string()));
  EXPECT_FALSE(fs::exists(root / "checkpoint-0000000006.rankwise-tmp.Ab12Cd"));
  fs::remove_all(root);
}

TEST(ShardedCheckpointManager, ALoadThatFailsNamesTheCheckpointAndTheKeys) {
  const auto root = fresh_dir("mismatch");
  rankwise::checkpoint::ShardedCheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(root.string()));
  manager.save(one_rank_state(1), 7);
  rankwise::checkpoint::ShardedState other;
  other.emplace("v", rankwise::checkpoint::shard_rows(at::zeros({4}), 0, 1));
  try {
    manager.load_latest_collective(other);
    ADD_FAILURE() << "no error";
  } catch (const rankwise::CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("loading the latest sharded checkpoint '" + (root / "checkpoint-0000000007").string() +
                        "' failed: "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("the keys differ"), std::string::npos) << what;
  }
  fs::remove_all(root);
}

TEST(ShardedCheckpointManager, BadOptionsAndASecondManagerAreRefused) {
  const auto root = fresh_dir("options");
  EXPECT_THROW(rankwise::checkpoint::ShardedCheckpointManager(rankwise::checkpoint::CheckpointManagerOptions(root.string()).keep_last(0)),
               rankwise::ConfigError);
  rankwise::checkpoint::ShardedCheckpointManager first{rankwise::checkpoint::CheckpointManagerOptions(root.string())};
  EXPECT_THROW(rankwise::checkpoint::ShardedCheckpointManager{rankwise::checkpoint::CheckpointManagerOptions(root.string())},
               rankwise::CheckpointError);
  fs::remove_all(root);
}

// save_async on 2 ranks (the worker's save-async mode overwrites the state after each call): every
// file of every checkpoint is byte for byte what save() wrote, and loads at another world size.
TEST(ShardedCheckpointManager, AsyncSavesWriteTheBytesOfSavesAndLoadAtAnotherWorldSize) {
  const auto base = fresh_dir("async_bytes");
  const auto sync_root = base / "sync", async_root = base / "async";
  ASSERT_NE(run_worker(2, "save " + sync_root.string() + " 1 3 2").find("exit=0"), std::string::npos);
  const auto saved = run_worker(2, "save-async " + async_root.string() + " 1 3 2");
  ASSERT_NE(saved.find("exit=0"), std::string::npos) << saved;
  EXPECT_EQ(count(saved, "saved step 3"), 2) << saved;
  EXPECT_EQ(names_in(async_root), names_in(sync_root));
  for (const char* step : {"checkpoint-0000000200", "checkpoint-0000000300"}) {
    EXPECT_EQ(names_in(async_root / step), names_in(sync_root / step)) << step;
    for (const auto& name : names_in(sync_root / step)) {
      EXPECT_TRUE(read(sync_root / step / name) == read(async_root / step / name)) << step << "/" << name << " differs";
    }
  }
  EXPECT_EQ(read(async_root / "latest"), "checkpoint-0000000300\n");
  const auto loaded = run_worker(3, "load " + async_root.string());
  EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
  EXPECT_EQ(count(loaded, "loaded step 3, values ok"), 3) << loaded;
  fs::remove_all(base);
}

// SIGKILL of one rank at each point of an asynchronous save: in its background write (the data
// file's bytes, fsync, rename, directory fsync) and in its publication at the next call (rename into
// place, `latest`, pruning). The checkpoint before it stays loadable, values exact, and the next run
// saves again. Each run saves steps S (killed) and S + 1.
struct AsyncKill {
  int rank;
  const char* fault;
  bool published;  // the killed step may be latest afterwards
};

// Each of `kills` in turn, in a run of save_async from the last good step
// on: the last good checkpoint (or, where `published`, the killed step's)
// loads exactly, and the next run saves and publishes.
void expect_async_kills_leave_the_last_good(const std::string& name, const std::vector<AsyncKill>& kills) {
  const auto logs = fresh_dir(name);
  const auto root = logs / "ckpts";
  ASSERT_NE(run_worker(2, "save-async " + root.string() + " 1 1 3").find("exit=0"), std::string::npos);
  int64_t good = 1, step = 1;
  for (const auto& kill : kills) {
    step += 1;
    const auto out = rankwise::test::run_by_hand(kWorker, 2, kill.rank, kill.fault,
                                                 "save-async " + root.string() + " " + std::to_string(step) + " " +
                                                     std::to_string(step + 1) + " 3",
                                                 logs);
    const std::string& survivor = out[static_cast<std::size_t>(1 - kill.rank)];
    EXPECT_NE(survivor.find("error:"), std::string::npos) << kill.fault << ": " << survivor;
    EXPECT_EQ(survivor.find("saved step"), std::string::npos) << kill.fault << ": " << survivor;
    EXPECT_EQ(out[static_cast<std::size_t>(kill.rank)].find("saved step"), std::string::npos) << kill.fault;
    const auto loaded = run_worker(2, "load " + root.string());
    const bool at_good = count(loaded, "loaded step " + std::to_string(good) + ", values ok") == 2;
    const bool at_new = count(loaded, "loaded step " + std::to_string(step) + ", values ok") == 2;
    EXPECT_TRUE(at_good || (kill.published && at_new)) << kill.fault << ": " << loaded;
    // Resumed: the next run saves and publishes.
    step += 2;
    const auto next = run_worker(2, "save-async " + root.string() + " " + std::to_string(step) + " " +
                                        std::to_string(step) + " 3");
    ASSERT_NE(next.find("exit=0"), std::string::npos) << "after " << kill.fault << ": " << next;
    EXPECT_EQ(read(root / "latest"), fmt::format("checkpoint-{:010d}\n", step * 100)) << kill.fault;
    good = step;
  }
  // Nothing left behind but keep_last (3) checkpoints, the pointer and the lock.
  EXPECT_EQ(names_in(root).size(), 5u) << fmt::format("{}", fmt::join(names_in(root), " "));
  const auto loaded = run_worker(3, "load " + root.string());
  EXPECT_EQ(count(loaded, "loaded step " + std::to_string(good) + ", values ok"), 3) << loaded;
  fs::remove_all(logs);
}

// The background write's points (the data file's first byte, its fsync, the
// leader's rename and directory fsync) and the publication's at the next
// call (before it, before `latest`, before pruning), as two tests that
// ctest runs side by side.
TEST(ShardedCheckpointManager, ARankKilledAtEachPointOfAnAsyncSavesWriteLeavesTheLastGoodCheckpoint) {
  expect_async_kills_leave_the_last_good("async_kill_write", {{1, "kill_at_byte=1", false},
                                                              {1, "kill_at=before-fsync", false},
                                                              {0, "kill_at=before-rename", false},
                                                              {1, "kill_at=before-dir-fsync", false}});
}

TEST(ShardedCheckpointManager, ARankKilledAtEachPointOfAnAsyncSavesPublicationLeavesTheLastGoodCheckpoint) {
  expect_async_kills_leave_the_last_good("async_kill_publish", {{0, "kill_at=before-publish", false},
                                                                {0, "kill_at=before-latest", false},
                                                                {0, "kill_at=before-prune", true}});
}

// `root` holds exactly `names`, and `latest` names step `step`'s checkpoint, which loads at 2 ranks.
void expect_latest_loads(const fs::path& root, int step, const std::vector<std::string>& names) {
  EXPECT_EQ(read(root / "latest"), fmt::format("checkpoint-{:010d}\n", step * 100));
  EXPECT_EQ(names_in(root), names);
  const auto loaded = run_worker(2, "load " + root.string());
  EXPECT_EQ(count(loaded, fmt::format("loaded step {}, values ok", step)), 2) << loaded;
}

// Each of `out` (rank r's output) queued step `step` - 1 and no further: its save_async of `step`
// raised the failure of the save of step - 1 (at `root`), with each of `phrases`.
void expect_raised_on_every_rank(const std::vector<std::string>& out, const fs::path& root, int step,
                                 const std::vector<std::string>& phrases) {
  const std::string failed = (root / fmt::format("checkpoint-{:010d}", (step - 1) * 100)).string();
  for (const std::string& o : out) {
    EXPECT_NE(o.find(fmt::format("queued step {}", step - 1)), std::string::npos) << o;
    EXPECT_NE(o.find("error: rankwise: the asynchronous save of '" + failed + "' failed: "), std::string::npos) << o;
    for (const auto& phrase : phrases) EXPECT_NE(o.find(phrase), std::string::npos) << phrase << " in " << o;
    EXPECT_EQ(o.find(fmt::format("queued step {}", step)), std::string::npos) << o;
  }
}

// With one storage node, rank 0 publishes step 2 on step 3's writer thread. A publication failing
// there (a directory that is not a checkpoint appeared at step 2's path) fails step 3, which every
// rank raises at its next call; step 1 stays latest, and the directory in the way is untouched.
TEST(ShardedCheckpointManager, APublicationFailingOnTheWriterThreadIsRaisedOnEveryRank) {
  const auto logs = fresh_dir("async_publish_fails");
  const auto root = logs / "ckpts";
  ::setenv("RANKWISE_TEST_BLOCK_STEP", "2", 1);
  const auto out = rankwise::test::run_by_hand(kWorker, 2, -1, "", "save-async " + root.string() + " 1 4 3", logs);
  ::unsetenv("RANKWISE_TEST_BLOCK_STEP");
  expect_raised_on_every_rank(out, root, 4,
                              {"on rank 0: publishing the previous asynchronous save '" +
                                   (root / "checkpoint-0000000200").string() + "' failed: ",
                               "is not a sharded checkpoint"});
  expect_latest_loads(root, 1, {"checkpoint-0000000100", "checkpoint-0000000200", "latest", "rankwise.lock"});
  EXPECT_EQ(names_in(root / "checkpoint-0000000200"), std::vector<std::string>{"user-data"});
  fs::remove_all(logs);
}

// Two save_async calls for step 2 in a row (an interval's save and an epoch end's): the first is
// published at the second call, on the training thread, before the second begins (else the second
// would take the first's temporary directory for a killed save's leftovers); the second replaces it.
TEST(ShardedCheckpointManager, TwoAsyncSavesOfTheSameStepInARowBothPublish) {
  const auto logs = fresh_dir("async_same_step");
  const auto root = logs / "ckpts";
  ::setenv("RANKWISE_TEST_SAVE_TWICE", "2", 1);
  const auto out = run_worker(2, "save-async " + root.string() + " 1 2 3");
  ::unsetenv("RANKWISE_TEST_SAVE_TWICE");
  ASSERT_NE(out.find("exit=0"), std::string::npos) << out;
  EXPECT_EQ(out.find("removed what an interrupted save left"), std::string::npos) << out;
  expect_latest_loads(root, 2, {"checkpoint-0000000100", "checkpoint-0000000200", "latest", "rankwise.lock"});
  fs::remove_all(logs);
}

// A full disk on rank 1 during the background write of step 2: every rank raises it at its next
// call (save_async of step 3), naming rank 1; step 1 stays latest and loads.
TEST(ShardedCheckpointManager, ADiskFullOnOneRankDuringAnAsyncSaveIsRaisedOnEveryRank) {
  const auto logs = fresh_dir("async_full");
  const auto root = logs / "ckpts";
  ::setenv("RANKWISE_TEST_DISK_FULL", "1@2", 1);
  const auto out = rankwise::test::run_by_hand(kWorker, 2, -1, "", "save-async " + root.string() + " 1 3 3", logs);
  ::unsetenv("RANKWISE_TEST_DISK_FULL");
  expect_raised_on_every_rank(out, root, 3, {"failed while writing the data files on rank 1", "File too large"});
  expect_latest_loads(root, 1, {"checkpoint-0000000100", "latest", "rankwise.lock"});
  fs::remove_all(logs);
}

// Node-local disks (2 simulated nodes of 2 ranks) with save_async: each node's leader publishes its
// disk's directory and moves that disk's `latest` at the next call, and the result loads as 2 x 1.
TEST(ShardedCheckpointManager, AsyncSavesOnNodeLocalDisksPublishOnEveryDisk) {
  const auto disks = fresh_dir("async_node_local");
  const auto saved = run_worker(4, "save-async ckpts 1 3 2 " + disks.string() + " 2");
  ASSERT_NE(saved.find("exit=0"), std::string::npos) << saved;
  EXPECT_EQ(count(saved, "saved step 3"), 4) << saved;
  for (const char* node : {"node0", "node1"}) {
    const auto root = disks / node / "ckpts";
    EXPECT_EQ(read(root / "latest"), "checkpoint-0000000300\n") << node;
    EXPECT_TRUE(fs::exists(root / "checkpoint-0000000200")) << node;
    EXPECT_FALSE(fs::exists(root / "checkpoint-0000000100")) << node;  // pruned on every disk
  }
  EXPECT_TRUE(fs::exists(disks / "node1/ckpts/checkpoint-0000000300/__3_0.distcp"));
  EXPECT_FALSE(fs::exists(disks / "node0/ckpts/checkpoint-0000000300/__3_0.distcp"));
  const auto loaded = run_worker(2, "load ckpts " + disks.string() + " 1");
  EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
  EXPECT_EQ(count(loaded, "loaded step 3, values ok"), 2) << loaded;
  fs::remove_all(disks);
}

// A rank that saves another step than the others (its own loop count) is
// refused on every rank, naming it, and nothing is published, synchronous
// or not. Before: rank 0's step was published and rank 1 was handed the
// path of a checkpoint that never existed.
TEST(ShardedCheckpointManager, RanksSavingDifferentStepsAreRefusedOnEveryRank) {
  for (const std::string mode : {"save", "save-async"}) {
    const auto root = fresh_dir("skewed_" + mode);
    ::setenv("RANKWISE_TEST_SKEWED_RANK", "1", 1);
    const std::string out = run_worker(2, mode + " " + root.string() + " 1 1 2");
    ::unsetenv("RANKWISE_TEST_SKEWED_RANK");
    EXPECT_EQ(count(out, "exit=0"), 0) << out;
    EXPECT_NE(out.find("it saves '" + (root / "checkpoint-0000000200").string() +
                       "' while rank 0 saves the temporary directory '" +
                       (root / "checkpoint-0000000100").string() + ".rankwise-tmp."),
              std::string::npos)
        << mode << "\n" << out;
    EXPECT_NE(out.find("every rank must pass the same directory (for a manager, the same step)"),
              std::string::npos)
        << out;
    for (const auto& name : names_in(root)) {
      EXPECT_EQ(name.rfind("checkpoint-", 0), std::string::npos) << mode << ": " << name << "\n" << out;
    }
    fs::remove_all(root);
  }
}
