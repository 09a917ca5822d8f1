// Fault injection (RANKWISE_CHECKPOINT_FAULT, see
// src/checkpoint/io/fault_injection.h): a writer SIGKILLed at 15 points
// of a save (8 of a background save) never costs the last good checkpoint,
// and the next save works;
// writers racing on one path never publish a torn file; a file size limit
// (`ulimit -f`) is a CheckpointError, not death by SIGXFSZ.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "rankwise/checkpoint/manager.h"
#include "support/shell.h"

namespace fs = std::filesystem;
using rankwise::test::shell;

namespace {

const std::string kWriter = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_checkpoint_writer";

// Runs the writer; returns its output followed by "rc=<exit status>".
std::string writer(const std::string& args, const std::string& fault = "") {
  const std::string env = fault.empty() ? "" : "RANKWISE_CHECKPOINT_FAULT=" + fault + " ";
  return shell(env + kWriter + " " + args + " 2>&1; echo rc=$?");
}

int64_t latest_step(const fs::path& dir) {
  rankwise::checkpoint::CheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(dir.string()));
  auto latest = manager.load_latest();
  return latest ? latest->at("step").toInt() : -1;
}

// `byte_points` kills at byte offsets drawn from a fixed seed across the
// whole file, then one at each of the 5 phases between the write and the end
// of the save, each followed by a save that must work. `mode` is the
// writer's: "manager" (save) or "manager-async" (save_async, then training
// overwrites the state before wait()).
void kill_during_saves(const std::string& mode, int byte_points) {
  const auto dir = fs::temp_directory_path() / ("rankwise_faults_" + mode + std::to_string(::getpid()));
  fs::remove_all(dir);
  ASSERT_NE(writer(mode + " " + dir.string() + " 1").find("saved\nrc=0"), std::string::npos);
  const auto file_size = fs::file_size(dir / "checkpoint-0000000001.pt");

  std::vector<std::string> faults;
  std::mt19937_64 rng(20261130);
  std::uniform_int_distribution<std::size_t> offset(1, file_size - 1);
  for (int i = 0; i < byte_points; ++i) faults.push_back("kill_at_byte=" + std::to_string(offset(rng)));
  for (const char* phase :
       {"before-fsync", "before-rename", "before-dir-fsync", "before-latest", "before-prune"}) {
    faults.push_back(std::string("kill_at=") + phase);
  }

  int64_t good = 1;
  int64_t step = 1;
  for (const auto& fault : faults) {
    ++step;
    const std::string out = writer(mode + " " + dir.string() + " " + std::to_string(step), fault);
    EXPECT_NE(out.find("rc=137"), std::string::npos) << fault << ": " << out;  // 128 + SIGKILL
    // Killed before the rename: the previous checkpoint is the latest; after
    // it, the new one may be (it is complete and durable).
    const int64_t latest = latest_step(dir);
    const bool renamed = fault == "kill_at=before-dir-fsync" || fault == "kill_at=before-latest" ||
                         fault == "kill_at=before-prune";
    if (renamed) {
      EXPECT_TRUE(latest == step || latest == good) << fault << ": latest " << latest;
    } else {
      EXPECT_EQ(latest, good) << fault;
    }
    good = latest;
    // The next save works and becomes the latest, its payload whole.
    ++step;
    ASSERT_NE(writer(mode + " " + dir.string() + " " + std::to_string(step)).find("saved\nrc=0"),
              std::string::npos)
        << "after " << fault;
    EXPECT_EQ(latest_step(dir), step) << "after " << fault;
    if (mode == "manager-async") {  // the file holds the state before training overwrote it
      const auto path = dir / fmt::format("checkpoint-{:010d}.pt", step);
      EXPECT_EQ(shell(kWriter + " check " + path.string() + " - 2>&1"), fmt::format("value {}\n", step));
    }
    good = step;
  }
  // Nothing left behind but keep_last (2) checkpoints, the pointer and the lock.
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename());
  EXPECT_EQ(names.size(), 4u);
  EXPECT_TRUE(names.count("latest") && names.count("rankwise.lock"));
  fs::remove_all(dir);
}

}  // namespace

TEST(CheckpointFaults, KillDuringSaveAtFifteenPointsKeepsTheLastGoodCheckpoint) {
  kill_during_saves("manager", 10);
}

// The same kills in save_async's background thread, while the state it was
// given is overwritten: the file holds the state as it was at the call.
TEST(CheckpointFaults, KillDuringAnAsyncSaveAtEightPointsKeepsTheLastGoodCheckpoint) {
  kill_during_saves("manager-async", 3);
}

TEST(CheckpointFaults, WritersRacingOnOnePathNeverPublishATornFile) {
  const auto dir = fs::temp_directory_path() / ("rankwise_race_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "shared.pt").string();
  // Four processes save to the same path at once, each slowed down mid-write
  // (sleep_ms) so that they overlap: as if every rank bypassed rank-0 saving.
  std::ostringstream command;
  command << "for v in 1 2 3 4; do (RANKWISE_CHECKPOINT_FAULT=sleep_ms=400 " << kWriter
          << " plain " << path << " $v; echo rc=$?) & done; wait";
  const std::string out = shell(command.str() + " 2>&1");
  int saved = 0, refused = 0;
  // (The background writers' lines may interleave: count exit statuses.)
  for (std::size_t at = 0; (at = out.find("rc=0", at)) != std::string::npos; ++at) ++saved;
  for (std::size_t at = 0; (at = out.find("refusing to write it concurrently", at)) != std::string::npos; ++at) {
    ++refused;
  }
  EXPECT_GE(saved, 1) << out;
  EXPECT_GE(refused, 1) << out;  // they overlapped, and the losers were told why
  EXPECT_EQ(saved + refused, 4) << out;
  const std::string check = shell(kWriter + " check " + path + " - 2>&1");
  EXPECT_NE(check.find("value "), std::string::npos) << check;
  for (auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  fs::remove_all(dir);
}

// Saves value 2 over a saved value 1 at `path` under a 1 MiB file-size
// limit (`ulimit -f 1024`; `trap`: also SIGXFSZ ignored by the shell), which
// the 4 MiB payload cannot fit; returns the writer's output and "rc=N". The
// previous file must still hold value 1, with no temporary file left.
static std::string save_over_a_file_size_limit(const fs::path& dir, const std::string& trap) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "a.pt").string();
  EXPECT_NE(writer("plain " + path + " 1").find("saved\nrc=0"), std::string::npos);
  auto* inherited = ::signal(SIGXFSZ, SIG_DFL);  // the writer starts with SIGXFSZ's default action
  const std::string out = shell("bash -c \"" + trap + "ulimit -f 1024; exec " + kWriter + " plain " + path +
                                " 2\" 2>&1; echo rc=$?");
  ::signal(SIGXFSZ, inherited);
  EXPECT_EQ(shell(kWriter + " check " + path + " - 2>&1"), "value 1\n");
  for (auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  fs::remove_all(dir);
  return out;
}

TEST(CheckpointFaults, DiskFullIsACheckpointErrorAndKeepsThePreviousFile) {
  const auto dir = fs::temp_directory_path() / ("rankwise_full_" + std::to_string(::getpid()));
  const std::string out = save_over_a_file_size_limit(dir, "trap '' XFSZ; ");
  EXPECT_NE(out.find("error: rankwise: checkpoint write of '" + (dir / "a.pt").string() +
                     "' failed at write: File too large"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("Nothing was replaced: the last good checkpoint is as it was"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
}

// Without the shell's trap, SIGXFSZ's default action would kill the writer
// (rc=153): rankwise ignores the signal before it writes, so the limit is a
// CheckpointError that names it and says how to raise it.
TEST(CheckpointFaults, AFileSizeLimitIsACheckpointErrorNamingTheLimitNotSIGXFSZ) {
  const auto dir = fs::temp_directory_path() / ("rankwise_fsize_" + std::to_string(::getpid()));
  const std::string out = save_over_a_file_size_limit(dir, "");
  EXPECT_NE(out.find("failed at write: File too large: the file reached this process's file size limit "
                     "(RLIMIT_FSIZE) of 1048576 bytes (`ulimit -f` 1024); raise it, e.g. `ulimit -f "
                     "unlimited` in the shell that starts the job. Nothing was replaced"),
            std::string::npos)
      << out;
  // Not the advice for a full disk: the limit is the cause, and the text says so.
  EXPECT_EQ(out.find("has free space"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
}
