// Checkpoints and PyTorch, both directions: our model state loads into the
// equivalent nn.Module with torch.load + load_state_dict, and a state_dict
// saved by Python's torch.save (with DDP's "module." prefix) loads into our C++
// model. Each runs with the torch of the libtorch we were built against
// (SameTorch: outputs compared bitwise) and with the other supported version
// (OtherTorch: 1.13's Python against a 2.x build and the reverse; its kernels
// round differently, so outputs agree within 1e-6 while both sides must read
// bitwise the same state: equal CRC-32 fingerprints). Python's torch.save and
// libtorch's use the same serializer of a version, so this moves checkpoints
// between libtorch 1.13 and 2.x in both directions.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "support/shell.h"

namespace fs = std::filesystem;
using rankwise::test::ReferencePython;
using rankwise::test::shell;

namespace {
const std::string kProgram = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_interop_model";
const std::string kScript = std::string(RANKWISE_SOURCE_DIR) + "/tests/python/checkpoint_interop.py";

class CheckpointInterop : public ::testing::TestWithParam<ReferencePython> {
 protected:
  void SetUp() override {
    if (!rankwise::test::have_python_torch(GetParam().interpreter)) {
      GTEST_SKIP() << "the reference Python (" << GetParam().interpreter << ") cannot import torch";
    }
    dir_ = fs::temp_directory_path() /
           ("rankwise_interop_" + std::string(GetParam().name) + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string python() const { return rankwise::test::python(GetParam().interpreter); }
  bool same_torch() const { return std::string(GetParam().name) == "SameTorch"; }
  // The extra argument that makes a probe comparison tolerant, for another version.
  std::string tolerance() const { return same_torch() ? "" : " 1e-6"; }
  // What a probe comparison prints on success.
  std::string agreement() const { return same_torch() ? "equal" : "close"; }
  // Both sides' fingerprints of FILE's state_dict (FILE[KEY]); they must match.
  void expect_same_fingerprint(const std::string& file, const std::string& key = "") const {
    const std::string ours = shell(kProgram + " fingerprint " + file + " " + key + " 2>&1");
    ASSERT_EQ(ours.rfind("fingerprint ", 0), 0u) << ours;
    EXPECT_EQ(shell(python() + kScript + " fingerprint " + file + " " + key + " 2>&1"), ours);
  }
  fs::path dir_;
};
}  // namespace

TEST_P(CheckpointInterop, PythonLoadsOurModelState) {
  const std::string ckpt = (dir_ / "cpp.pt").string();
  ASSERT_EQ(shell(kProgram + " write " + ckpt + " 2>&1"), "written\n");
  const std::string out = shell(python() + kScript + " check-cpp " + ckpt + tolerance() + " 2>&1");
  // fc1 and fc2 weight and bias, bn weight, bias and 3 buffers.
  EXPECT_EQ(out, agreement() + " (step 3, 9 entries)\n");
  expect_same_fingerprint(ckpt, "model");
}

TEST_P(CheckpointInterop, WeLoadAStateDictSavedByPython) {
  const std::string sd = (dir_ / "python_sd.pt").string(), probe = (dir_ / "probe.pt").string();
  ASSERT_EQ(shell(python() + kScript + " write " + sd + " " + probe + " 2>&1"), "written\n");
  EXPECT_EQ(shell(kProgram + " read " + sd + " " + probe + tolerance() + " 2>&1"), agreement() + "\n");
  EXPECT_EQ(shell(kProgram + " read-full " + sd + ".full " + probe + tolerance() + " 2>&1"), agreement() + "\n");
  expect_same_fingerprint(sd);
  expect_same_fingerprint(sd + ".full", "model");
  expect_same_fingerprint(sd + ".full", "ema");
}

INSTANTIATE_TEST_SUITE_P(WithTorch, CheckpointInterop, ::testing::ValuesIn(rankwise::test::kReferencePythons),
                         [](const auto& info) { return rankwise::test::reference_python_name(info.param); });
