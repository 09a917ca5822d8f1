// FullyShardedDataParallel's checkpoints against PyTorch 2.x's fully_shard
// (FSDP2) through DCP, both directions and across world sizes: rankwise saves
// at 2 ranks and 4 (a shard with no row), PyTorch loads at 3; PyTorch saves at
// 2, rankwise loads at 3 and 1 and matches tests/python/fsdp_interop.py's
// unsharded reference. The worker: tests/programs/torch_fsdp_checkpoint.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "checkpoint/tool/ckpt_tool.h"
#include "support/shell.h"
#include "support/workers.h"

namespace {

const std::string kRun = RANKWISE_RUN_PATH;
const std::string kWorker = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_fsdp_checkpoint";
const std::string kInterop = std::string(RANKWISE_SOURCE_DIR) + "/tests/python/fsdp_interop.py";

// A Python whose torch is 2.x (fully_shard, DCP), or "" when neither reference Python has one.
std::string torch2_python() {
  for (const std::string python : {std::string(RANKWISE_PYTHON), std::string(RANKWISE_OTHER_PYTHON)}) {
    if (python.empty()) continue;
    const auto out = rankwise::test::shell(
        python + " -c 'import torch; from torch.distributed.fsdp import fully_shard; print(\"fsdp2\")' 2>/dev/null");
    if (out.find("fsdp2") != std::string::npos) return python;
  }
  return "";
}

std::map<std::string, std::pair<double, double>> fingerprints(const std::string& text) {
  std::map<std::string, std::pair<double, double>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("fp ");
    if (at == std::string::npos) continue;
    std::istringstream fields(line.substr(at + 3));
    std::string key;
    double sum = 0, sumsq = 0;
    if (fields >> key >> sum >> sumsq) out[key] = {sum, sumsq};
  }
  return out;
}

TEST(FsdpPythonInterop, PyTorchFullyShardLoadsWhatRankwiseSaved) {
  const std::string python = torch2_python();
  if (python.empty()) GTEST_SKIP() << "no Python with torch >= 2 and fully_shard (RANKWISE_PYTHON, RANKWISE_OTHER_PYTHON)";
  for (const int saved_at : {2, 4}) {
    const auto dir = rankwise::test::fresh_dir("rankwise_fsdp_interop", "to_python_" + std::to_string(saved_at));
    const std::string saved = rankwise::test::run_launched(kRun, saved_at, kWorker, "save " + (dir / "ckpt").string());
    ASSERT_NE(saved.find("exit=0"), std::string::npos) << saved;
    const std::string loaded = rankwise::test::shell(python + " " + kInterop + " load " + (dir / "ckpt").string() + " 3 2>&1; echo exit=$?");
    EXPECT_EQ(rankwise::test::count(loaded, ": ok"), 3) << loaded;
    EXPECT_NE(loaded.find("exit=0"), std::string::npos) << loaded;
  }
}

TEST(FsdpPythonInterop, RankwiseLoadsWhatPyTorchFullyShardSaved) {
  const std::string python = torch2_python();
  if (python.empty()) GTEST_SKIP() << "no Python with torch >= 2 and fully_shard (RANKWISE_PYTHON, RANKWISE_OTHER_PYTHON)";
  const auto dir = rankwise::test::fresh_dir("rankwise_fsdp_interop", "from_python");
  const std::string saved = rankwise::test::shell(python + " " + kInterop + " save " + (dir / "ckpt").string() + " 2 2>&1; echo exit=$?");
  ASSERT_NE(saved.find("exit=0"), std::string::npos) << saved;
  const auto want = fingerprints(rankwise::test::shell(python + " " + kInterop + " reference"));
  ASSERT_EQ(want.size(), 12u);
  for (const int nproc : {3, 1}) {
    const std::string out = rankwise::test::run_launched(kRun, nproc, kWorker, "check " + (dir / "ckpt").string());
    ASSERT_NE(out.find("exit=0"), std::string::npos) << out;
    const auto got = fingerprints(out);
    for (const auto& [key, value] : want) {
      ASSERT_TRUE(got.count(key)) << key << " at " << nproc << " ranks\n" << out;
      EXPECT_NEAR(got.at(key).first, value.first, 1e-5 * std::max(1.0, std::abs(value.first))) << key;
      EXPECT_NEAR(got.at(key).second, value.second, 1e-5 * std::max(1.0, value.second)) << key;
    }
  }
}

}  // namespace

// fsdp at 4 ranks -> fsdp at 2 -> replicated (a DDP program) at 3 -> one
// plain process -> fsdp at 3: every load sees the parameters and Adam's
// moments the 4 ranks saved (sums and sums of squares; a sharded sum adds
// in another order, hence the 1e-12 relative tolerance). No Python needed.
TEST(FsdpCheckpointWorldSizes, FourToTwoToReplicatedThreeToOneAndBackToThree) {
  const auto dir = rankwise::test::fresh_dir("rankwise_fsdp_world_sizes", "chain");
  const std::string saved = rankwise::test::run_launched(kRun, 4, kWorker, "save " + (dir / "fsdp4").string());
  ASSERT_NE(saved.find("exit=0"), std::string::npos) << saved;
  const auto want = fingerprints(saved);
  ASSERT_EQ(want.size(), 12u) << saved;
  auto expect_same = [&](const std::string& out, const std::string& step) {
    ASSERT_NE(out.find("exit=0"), std::string::npos) << step << "\n" << out;
    const auto got = fingerprints(out);
    EXPECT_EQ(got.size(), want.size()) << step << "\n" << out;
    for (const auto& [key, value] : want) {
      ASSERT_TRUE(got.count(key)) << key << " after " << step << "\n" << out;
      EXPECT_NEAR(got.at(key).first, value.first, 1e-12 * std::max(1.0, std::abs(value.first))) << key << " " << step;
      EXPECT_NEAR(got.at(key).second, value.second, 1e-12 * std::max(1.0, value.second)) << key << " " << step;
    }
  };
  const auto at = [&](const char* name) { return (dir / name).string(); };
  expect_same(rankwise::test::run_launched(kRun, 2, kWorker, "check " + at("fsdp4")), "fsdp at 2");
  expect_same(rankwise::test::run_launched(kRun, 3, kWorker, "replicated " + at("fsdp4") + " " + at("ddp3")),
              "replicated at 3");
  expect_same(rankwise::test::run_launched(kRun, 1, kWorker, "replicated " + at("ddp3") + " " + at("plain1")),
              "one process");
  expect_same(rankwise::test::run_launched(kRun, 3, kWorker, "check " + at("plain1")), "fsdp at 3");
  // rankwise-ckpt: the sharded original verifies, equals what the one process
  // saved again key by key, bitwise, and converts to one safetensors file.
  auto tool = [](std::vector<std::string> args) {
    std::vector<const char*> argv{"rankwise-ckpt"};
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int status = rankwise::checkpoint::tool::run(static_cast<int>(argv.size()), argv.data(), out, err);
    return std::make_pair(status, out.str() + err.str());
  };
  const auto verified = tool({"verify", at("fsdp4")});
  EXPECT_EQ(verified.first, 0) << verified.second;
  const auto diff = tool({"diff", at("fsdp4"), at("plain1")});
  EXPECT_EQ(diff.first, 0) << diff.second;
  const auto converted = tool({"convert", "--to", "safetensors", "--prefix", "model.", at("fsdp4"), at("model.safetensors")});
  EXPECT_EQ(converted.first, 0) << converted.second;
  const auto listed = tool({"inspect", at("fsdp4")});
  EXPECT_NE(listed.second.find("model.0.weight"), std::string::npos) << listed.second;
}
