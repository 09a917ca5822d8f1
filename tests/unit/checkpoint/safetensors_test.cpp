// export_safetensors() (rankwise/checkpoint/safetensors.h): a replicated file
// and a sharded checkpoint saved at 3 ranks, read back by Hugging Face's
// safetensors package and compared with PyTorch's own reading of the source
// (tests/python/safetensors_interop.py), or with the values the sharded
// one was saved with (tests/python/dcp_interop.py's formulas); the files'
// names, the failures.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <filesystem>
#include <fstream>
#include <set>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/safetensors.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"
#include "support/shell.h"
#include "support/workers.h"

namespace fs = std::filesystem;
namespace ckpt = rankwise::checkpoint;
using rankwise::test::shell;

namespace {

const std::string kInterop = std::string(RANKWISE_SOURCE_DIR) + "/tests/python/safetensors_interop.py";

fs::path fresh_dir(const std::string& name) { return rankwise::test::fresh_dir("rankwise_safetensors", name); }

// The first reference Python with torch and the safetensors package, or "".
std::string safetensors_python() {
  for (const std::string python : {std::string(RANKWISE_PYTHON), std::string(RANKWISE_OTHER_PYTHON)}) {
    // importlib.metadata, not import: it answers in milliseconds, torch's import takes seconds.
    const auto out = shell(python + " -c 'import importlib.metadata as m; m.version(\"safetensors\"); "
                                    "m.version(\"torch\"); print(\"found\")' 2>/dev/null");
    if (out == "found\n") return python;
  }
  return "";
}

// A training-state-like checkpoint: nested dicts, a list, every dtype
// safetensors holds, a scalar, an empty and a non-contiguous tensor, and
// values that are not tensors.
ckpt::Checkpoint sample_checkpoint() {
  c10::impl::GenericDict model(c10::StringType::get(), c10::AnyType::get());
  model.insert("fc.weight", at::arange(12, at::kFloat).reshape({3, 4}).t());  // non-contiguous
  model.insert("fc.bias", at::tensor({-1.5, 2.25, 1e-30}, at::kFloat));
  model.insert("emb.half", at::arange(6, at::kFloat).to(at::kHalf) / 7);
  model.insert("emb.bf16", at::arange(5, at::kFloat).to(at::kBFloat16) * 3.3);
  model.insert("norm.scale", at::scalar_tensor(0.5, at::kDouble));
  model.insert("count", at::arange(4, at::kLong) * 1000000000007);
  model.insert("small", at::tensor({-3, 4}, at::kInt));
  model.insert("short", at::tensor({-300, 7}, at::kShort));
  model.insert("byte", at::tensor({200, 1}, at::kByte));
  model.insert("char", at::tensor({-100, 1}, at::kChar));
  model.insert("mask", at::arange(6) % 2 == 0);
  model.insert("empty", at::zeros({0, 3}));
  c10::List<at::Tensor> history;
  history.push_back(at::ones({2}));
  ckpt::Checkpoint c;
  c.insert("format", std::string("example"));
  c.insert("model", model);
  c.insert("history", history);
  c.insert("step", int64_t{7});
  return c;
}

// Runs safetensors_interop.py on each (kind, source, export, prefix).
std::string interop(const std::string& python, const std::vector<std::array<std::string, 4>>& checks) {
  std::string command = python + " " + kInterop;
  for (const auto& check : checks) {
    for (const auto& arg : check) command += " '" + arg + "'";
  }
  return shell(command + " 2>&1");
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

}  // namespace

// One test, so that Python (and torch's import, seconds) starts once.
TEST(SafetensorsExport, ReplicatedAndShardedAtThreeRanksReadBackBySafetensorsEqual) {
  const auto python = safetensors_python();
  if (python.empty()) GTEST_SKIP() << "no Python with torch and safetensors (scripts/setup-torch-wheel installs them)";
  const auto dir = fresh_dir("interop");
  // A replicated file: every tensor, then the model alone without its prefix
  // (the names a model's load_state_dict wants).
  const auto file = (dir / "ckpt.pt").string();
  ckpt::save(file, sample_checkpoint());
  auto result = ckpt::export_safetensors(file, (dir / "all.safetensors").string());
  EXPECT_EQ(result.files, std::vector<std::string>{(dir / "all.safetensors").string()});
  EXPECT_EQ(result.tensors.size(), 13u);
  EXPECT_EQ(result.skipped, (std::vector<std::string>{"format", "step"}));
  ckpt::export_safetensors(file, (dir / "model.safetensors").string(), ckpt::SafetensorsExportOptions().prefix("model."));

  // A sharded checkpoint saved at 3 ranks: read a tensor at a time from the 3 data files.
  const auto sharded = (dir / "sharded").string();
  const std::string worker = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_sharded_checkpoint";
  ASSERT_NE(rankwise::test::run_launched(RANKWISE_RUN_PATH, 3, worker, "save " + sharded + " rankwise 1").find("exit=0"),
            std::string::npos);
  // 10 tensors of 10 to 192 bytes: at most 100 bytes a file gives several files.
  result = ckpt::export_safetensors(sharded, (dir / "out").string(), ckpt::SafetensorsExportOptions().max_shard_bytes(100));
  EXPECT_EQ(result.tensors.size(), 10u);
  EXPECT_EQ(result.skipped.size(), 7u);  // epoch, lr, betas, name, ids, flags, big: not tensors
  ASSERT_GE(result.files.size(), 3u);
  const int n = static_cast<int>(result.files.size()) - 1;
  std::set<std::string> expected{"model.safetensors.index.json"};
  for (int i = 1; i <= n; ++i) expected.insert(fmt::format("model-{:05d}-of-{:05d}.safetensors", i, n));
  EXPECT_EQ(names_in(dir / "out"), expected);
  ckpt::export_safetensors(sharded, (dir / "one.safetensors").string());

  EXPECT_EQ(interop(python, {{"torch-save", file, (dir / "all.safetensors").string(), ""},
                             {"torch-save", file, (dir / "model.safetensors").string(), "model."},
                             {"set", "rankwise:1", (dir / "out" / "model.safetensors.index.json").string(), ""},
                             {"set", "rankwise:1", (dir / "one.safetensors").string(), ""}}),
            fmt::format("ok: 13 tensors in 1 files\nok: 12 tensors in 1 files\nok: 10 tensors in {} files\n"
                        "ok: 10 tensors in 1 files\n", n));
  fs::remove_all(dir);
}

void refuses_complex_missing_sources_prefixes_and_limits();

TEST(SafetensorsExport, FailuresLeaveNoFileUnderTheFinalNames) {
  const auto dir = fresh_dir("midway");
  ckpt::ShardedState state;
  state.emplace("a", at::arange(64, at::kFloat));
  state.emplace("b", at::arange(64, at::kFloat));
  ckpt::save_sharded((dir / "ckpt").string(), state);
  // Flip the first data byte of "b", the second tensor written: "a" is in a file by then.
  const auto manifest = nlohmann::json::parse(std::ifstream(dir / "ckpt" / ".rankwise-manifest.json"));
  for (const auto& chunk : manifest["chunks"]) {
    if (chunk["key"] != "b") continue;
    std::fstream f(dir / "ckpt" / chunk["file"].get<std::string>(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(chunk["offset"].get<int64_t>() + chunk["data_begin"].get<int64_t>());
    f.put('\x55');
  }
  try {
    ckpt::export_safetensors((dir / "ckpt").string(), (dir / "out").string(),
                             ckpt::SafetensorsExportOptions().max_shard_bytes(256));
    FAIL() << "a damaged tensor was exported";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(names_in(dir / "out"), std::set<std::string>{});  // neither file, nor the index, nor a temporary
  fs::remove_all(dir);
  refuses_complex_missing_sources_prefixes_and_limits();
}

// Part of SafetensorsExport.FailuresLeaveNoFileUnderTheFinalNames.
void refuses_complex_missing_sources_prefixes_and_limits() {
  const auto dir = fresh_dir("refused");
  ckpt::Checkpoint c;
  c.insert("a", at::ones({2}));
  c.insert("z", at::ones({2}, at::kComplexFloat));  // safetensors has no complex dtype
  ckpt::save((dir / "ckpt.pt").string(), c);
  try {
    ckpt::export_safetensors((dir / "ckpt.pt").string(), (dir / "out.safetensors").string());
    FAIL() << "a complex tensor was exported";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'z' is ComplexFloat"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ckpt::export_safetensors((dir / "missing.pt").string(), (dir / "o.safetensors").string()),
               rankwise::CheckpointError);
  EXPECT_THROW(ckpt::export_safetensors((dir / "ckpt.pt").string(), (dir / "o.safetensors").string(),
                                        ckpt::SafetensorsExportOptions().prefix("model.")),
               rankwise::CheckpointError);
  EXPECT_THROW(ckpt::export_safetensors((dir / "ckpt.pt").string(), (dir / "o").string(),
                                        ckpt::SafetensorsExportOptions().max_shard_bytes(-1)),
               rankwise::ConfigError);
  EXPECT_EQ(names_in(dir), (std::set<std::string>{"ckpt.pt", "ckpt.pt.lock"}));
  fs::remove_all(dir);
}
