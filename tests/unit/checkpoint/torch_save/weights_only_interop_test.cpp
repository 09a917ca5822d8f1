// Our checkpoints and torch.load(weights_only=True), PyTorch 2.6's default:
// seed 001's line reads them (run in the checkpoint's directory, as the seed
// does), and on torch >= 2.6 so does a plain torch.load(path) of a Fabric's
// training state. Each runs with both reference Pythons (SameTorch,
// OtherTorch). Debian's 1.13 reads no Python float weights-only ("Unsupported
// operand 71"), whoever wrote the file: Python's own seed checkpoint shows it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/state_dict.h"
#include "support/shell.h"
#include "support/workers.h"

namespace fs = std::filesystem;
using rankwise::test::ReferencePython;
using rankwise::test::shell;

namespace {

const std::string kScript = std::string(RANKWISE_SOURCE_DIR) + "/tests/python/weights_only_load.py";
const std::string kFabricProgram = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_fabric_strategy";

// What the script prints after a load equal to the unrestricted one.
const std::string kSeedLoaded = "loaded keys ['weight', 'bias']\nsame as weights_only=False\n";

class WeightsOnlyLoad : public ::testing::TestWithParam<ReferencePython> {
 protected:
  void SetUp() override {
    if (!rankwise::test::have_python_torch(GetParam().interpreter)) {
      GTEST_SKIP() << "the reference Python (" << GetParam().interpreter << ") cannot import torch";
    }
    dir_ = rankwise::test::fresh_dir("rankwise_weights_only", GetParam().name);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // The script's output for `mode` on `dir` (stderr included).
  std::string script(const std::string& mode, const fs::path& dir) const {
    return shell(rankwise::test::python(GetParam().interpreter) + kScript + " " + mode + " " +
                 dir.string() + " 2>&1");
  }
  // That Python's torch version, major and minor.
  std::pair<int, int> torch_version() const {
    const std::string text = script("version", "");
    const auto dot = text.find('.');
    if (dot == std::string::npos) return {0, 0};
    return {std::stoi(text.substr(0, dot)), std::stoi(text.substr(dot + 1))};
  }
  fs::path dir_;
};

// What seed 001's port (examples/save_and_log.cpp) saves, on one process.
rankwise::checkpoint::Checkpoint seed_checkpoint() {
  torch::manual_seed(0);
  torch::nn::Linear model(4, 1);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::manual_seed(50);
  const auto x = torch::randn({6, 4}), y = torch::randn({6, 1});
  opt.zero_grad();
  torch::mse_loss(model->forward(x), y).backward();
  opt.step();
  rankwise::checkpoint::Checkpoint state;
  state.insert("model", rankwise::checkpoint::state_dict(*model));
  state.insert("opt", rankwise::checkpoint::optimizer_state_dict(opt));
  state.insert("step", int64_t{1});
  return state;
}

}  // namespace

// No float anywhere: what 1.13's weights-only unpickler reads too. Typed
// lists and dicts, a tuple, a string and None beside the model.
TEST_P(WeightsOnlyLoad, TheSeedsLineReadsAModelStateDictAndIntegers) {
  auto state = seed_checkpoint();
  state.insert("opt", c10::IValue());
  state.insert("sizes", c10::List<int64_t>({4, 1}));
  state.insert("flags", c10::List<bool>({true, false}));
  state.insert("buffers", c10::List<at::Tensor>({torch::arange(3), torch::ones({2}, torch::kInt32)}));
  c10::Dict<std::string, int64_t> counts;
  counts.insert("epoch", 2);
  state.insert("counts", counts);
  state.insert("run", c10::ivalue::Tuple::create({c10::IValue(std::string("a")), c10::IValue(int64_t{7})}));
  rankwise::checkpoint::save((dir_ / "ckpt.pt").string(), state);
  EXPECT_EQ(script("seed", dir_), kSeedLoaded);
}

// The seed's own checkpoint holds the optimizer's floats (lr, momentum):
// read where that torch's weights-only unpickler reads floats, and refused
// by 1.13 exactly as the file Python's torch.save wrote.
TEST_P(WeightsOnlyLoad, TheSeedsLineReadsTheSeedsCheckpointAsPythonsOwn) {
  rankwise::checkpoint::save((dir_ / "ckpt.pt").string(), seed_checkpoint());
  const fs::path python_dir = dir_ / "python";
  fs::create_directories(python_dir);
  ASSERT_EQ(script("python-save", python_dir), "written\n");
  const std::string expected = torch_version().first >= 2 ? kSeedLoaded : "refused: Unsupported operand 71\n";
  EXPECT_EQ(script("seed", python_dir), expected);
  EXPECT_EQ(script("seed", dir_), expected);
}

// A Fabric's training state (the model, Adam's state, a StepLR, extras, every
// rank's RNG): torch.load(path) with its defaults, and the seed's line.
TEST_P(WeightsOnlyLoad, PlainTorchLoadReadsAFabricCheckpoint) {
  if (torch_version() < std::make_pair(2, 6)) {
    GTEST_SKIP() << "torch.load's default is weights_only=False before torch 2.6";
  }
  const std::string out = rankwise::test::run_launched(
      RANKWISE_RUN_PATH, 1, kFabricProgram, dir_.string() + " 0 --checkpoint-dir " + (dir_ / "ckpt").string());
  ASSERT_NE(out.find("exit=0"), std::string::npos) << out;
  std::string latest;
  std::ifstream(dir_ / "ckpt" / "latest") >> latest;
  fs::copy_file(dir_ / "ckpt" / latest, dir_ / "ckpt.pt");
  EXPECT_EQ(script("plain", dir_),
            "keys ['epoch', 'epoch_stretches', 'extras', 'format', 'lr_scheduler', 'model', 'optimizer', "
            "'optimizer_type', 'position', 'rank_states', 'step', 'world_size']\nsame as weights_only=False\n");
  EXPECT_EQ(script("seed", dir_),
            "loaded keys ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']\nsame as weights_only=False\n");
}

INSTANTIATE_TEST_SUITE_P(WithTorch, WeightsOnlyLoad, ::testing::ValuesIn(rankwise::test::kReferencePythons),
                         [](const auto& info) { return rankwise::test::reference_python_name(info.param); });
