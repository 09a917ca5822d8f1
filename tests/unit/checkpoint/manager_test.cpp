// CheckpointManager: schedule, numbered files, `latest`, keep_last, fallback
// past a damaged file, stale temporary files, one writer per directory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "rankwise/checkpoint/manager.h"
#include "rankwise/error.h"

namespace fs = std::filesystem;
using rankwise::checkpoint::CheckpointManager;
using rankwise::checkpoint::CheckpointManagerOptions;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("rankwise_mgr_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

rankwise::checkpoint::Checkpoint at_step(int64_t step) {
  rankwise::checkpoint::Checkpoint c;
  c.insert("step", step);
  c.insert("payload", torch::full({1000}, static_cast<float>(step)));
  return c;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(CheckpointManager, ScheduleEveryNStepsAndEpochEnd) {
  auto dir = fresh_dir("schedule");
  CheckpointManager by_steps(CheckpointManagerOptions(dir.string()).every_n_steps(100).at_epoch_end(false));
  EXPECT_FALSE(by_steps.should_save(0, false));
  EXPECT_FALSE(by_steps.should_save(99, false));
  EXPECT_TRUE(by_steps.should_save(100, false));
  EXPECT_FALSE(by_steps.should_save(150, true));
  EXPECT_TRUE(by_steps.should_save(300, false));
  fs::remove_all(dir);
  CheckpointManager by_epoch(CheckpointManagerOptions(dir.string()));
  EXPECT_FALSE(by_epoch.should_save(100, false));
  EXPECT_TRUE(by_epoch.should_save(150, true));
  fs::remove_all(dir);
}

TEST(CheckpointManager, KeepsLastKAndPointsLatestAtNewest) {
  auto dir = fresh_dir("keep");
  CheckpointManager manager(CheckpointManagerOptions(dir.string()).keep_last(2));
  EXPECT_FALSE(manager.latest().has_value());
  EXPECT_FALSE(manager.load_latest().has_value());
  EXPECT_EQ(manager.save(at_step(100), 100), (dir / "checkpoint-0000000100.pt").string());
  for (int64_t step : {200, 300, 400}) manager.save(at_step(step), step);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"checkpoint-0000000300.pt",
                                                     "checkpoint-0000000400.pt", "latest",
                                                     "rankwise.lock"}));
  EXPECT_EQ(read_text(dir / "latest"), "checkpoint-0000000400.pt\n");
  EXPECT_EQ(*manager.latest(), (dir / "checkpoint-0000000400.pt").string());
  EXPECT_EQ(manager.load_latest()->at("step").toInt(), 400);
  fs::remove_all(dir);
}

// A manager whose directory holds an earlier run's higher steps says so at its first save, once:
// keep_last keeps the highest numbers, so the new run's checkpoints would go first.
TEST(CheckpointManager, AFirstSaveBelowAnEarlierRunsStepsIsNoted) {
  auto dir = fresh_dir("earlier_run");
  {
    CheckpointManager earlier(CheckpointManagerOptions(dir.string()).keep_last(3));
    for (int64_t step : {400, 600}) earlier.save(at_step(step), step);
  }
  {
    CheckpointManager next(CheckpointManagerOptions(dir.string()).keep_last(3));
    testing::internal::CaptureStderr();
    next.save(at_step(200), 200);
    next.save(at_step(300), 300);
    const std::string err = testing::internal::GetCapturedStderr();
    const std::string note = "already holds checkpoints up to step 600, above this save's step 200";
    EXPECT_NE(err.find(note), std::string::npos) << err;
    EXPECT_EQ(err.find(note), err.rfind("already holds")) << err;  // once
    EXPECT_NE(err.find("clear() this one first"), std::string::npos) << err;
  }
  CheckpointManager resumed(CheckpointManagerOptions(dir.string()).keep_last(3));
  testing::internal::CaptureStderr();
  resumed.save(at_step(700), 700);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("already holds"), std::string::npos) << err;
  fs::remove_all(dir);
}

TEST(CheckpointManager, FallsBackPastADamagedLatest) {
  auto dir = fresh_dir("fallback");
  CheckpointManager manager(CheckpointManagerOptions(dir.string()).keep_last(3));
  manager.save(at_step(1), 1);
  manager.save(at_step(2), 2);
  {
    std::fstream f(dir / "checkpoint-0000000002.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  EXPECT_EQ(manager.load_latest()->at("step").toInt(), 1);
  // A missing pointer (killed before the first pointer write) is not fatal either.
  fs::remove(dir / "latest");
  EXPECT_EQ(manager.load_latest()->at("step").toInt(), 1);
  fs::remove_all(dir);
}

TEST(CheckpointManager, RemovesTemporaryFilesOfAKilledWriter) {
  auto dir = fresh_dir("stale");
  fs::create_directories(dir);
  std::ofstream(dir / "checkpoint-0000000005.pt.tmp.12345.AbCdEf") << "half a file";
  CheckpointManager manager(CheckpointManagerOptions(dir.string()));
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"rankwise.lock"}));
  fs::remove_all(dir);
}

TEST(CheckpointManager, SecondManagerOnTheSameDirectoryIsRefused) {
  auto dir = fresh_dir("twowriters");
  CheckpointManager first(CheckpointManagerOptions(dir.string()));
  try {
    CheckpointManager second(CheckpointManagerOptions(dir.string()));
    FAIL() << "second manager accepted";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint directory '" + dir.string() +
                                         "' is being written by process " +
                                         std::to_string(::getpid()) + "@"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(CheckpointManager, BadOptionsAndDirectories) {
  EXPECT_THROW(CheckpointManager(CheckpointManagerOptions("")), rankwise::ConfigError);
  EXPECT_THROW(CheckpointManager(CheckpointManagerOptions("/tmp/x").keep_last(0)), rankwise::ConfigError);
  EXPECT_THROW(CheckpointManager(CheckpointManagerOptions("/tmp/x").every_n_steps(-1)),
               rankwise::ConfigError);
  EXPECT_THROW(CheckpointManager(CheckpointManagerOptions("/tmp/x").prefix("a/b")),
               rankwise::ConfigError);
  try {
    CheckpointManager manager(CheckpointManagerOptions("/proc/rankwise-checkpoints"));
    FAIL() << "accepted a directory under /proc";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create the checkpoint directory '/proc/rankwise-checkpoints'"),
              std::string::npos)
        << e.what();
  }
}

// Each file's own advice ("load the previous checkpoint") would contradict
// the verdict that none verifies: the directory's message drops it.
TEST(CheckpointManager, NothingVerifiesGivesOneAdvice) {
  auto dir = fresh_dir("all_corrupt");
  CheckpointManager manager(CheckpointManagerOptions(dir.string()).keep_last(3));
  manager.save(at_step(1), 1);
  manager.save(at_step(2), 2);
  for (const char* name : {"checkpoint-0000000001.pt", "checkpoint-0000000002.pt"}) {
    std::fstream file(dir / name, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(60);
    file.put('\x7f');  // inside the first record: the CRC-32 no longer matches
  }
  try {
    manager.latest();
    FAIL() << "no error";
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("is corrupt: recorded CRC-32"), std::string::npos) << text;
    EXPECT_NE(text.find("and no other checkpoint file verifies"), std::string::npos) << text;
    EXPECT_EQ(text.find("load the previous checkpoint"), std::string::npos) << text;
    EXPECT_NE(text.find("Move the directory aside"), std::string::npos) << text;
  }
  fs::remove_all(dir);
}

TEST(CheckpointManager, FallsBackPastATruncatedLatestAndRefusesWhenNothingVerifies) {
  auto dir = fresh_dir("truncated");
  CheckpointManager manager(CheckpointManagerOptions(dir.string()).keep_last(3));
  manager.save(at_step(1), 1);
  manager.save(at_step(2), 2);
  // Cut off the end (checksum record and central directory), as a torn copy would.
  const auto newest = dir / "checkpoint-0000000002.pt";
  fs::resize_file(newest, fs::file_size(newest) - 1000);
  EXPECT_EQ(*manager.latest(), (dir / "checkpoint-0000000001.pt").string());
  std::string loaded_from;
  EXPECT_EQ(manager.load_latest(&loaded_from)->at("step").toInt(), 1);
  EXPECT_EQ(loaded_from, (dir / "checkpoint-0000000001.pt").string());
  // Nothing verifies: an error, not a silent fresh start.
  fs::resize_file(dir / "checkpoint-0000000001.pt", 100);
  fs::remove(dir / "latest");
  try {
    manager.latest();
    FAIL() << "no error";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("none of its 2 checkpoint files verifies"), std::string::npos)
        << e.what();
  }
  manager.clear();
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"rankwise.lock"}));
  EXPECT_FALSE(manager.latest().has_value());
  fs::remove_all(dir);
}
