// Checkpoints and PyTorch (Debian python3-torch 1.13), both directions: our
// model state loads into the equivalent nn.Module with torch.load +
// load_state_dict, and a state_dict saved by Python's torch.save (with DDP's
// "module." prefix) loads into our C++ model; outputs compared bitwise.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "support/shell.h"

namespace fs = std::filesystem;
using rankwise::test::shell;

namespace {
const std::string kProgram = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_interop_model";
const std::string kScript = std::string(RANKWISE_SOURCE_DIR) + "/tests/python/checkpoint_interop.py";
}  // namespace

TEST(CheckpointInterop, PythonLoadsOurModelState) {
  if (!rankwise::test::have_python_torch()) {
    GTEST_SKIP() << "the reference Python (" RANKWISE_PYTHON ") cannot import torch";
  }
  const auto dir = fs::temp_directory_path() / ("rankwise_interop_cpp_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string ckpt = (dir / "cpp.pt").string();
  ASSERT_EQ(shell(kProgram + " write " + ckpt + " 2>&1"), "written\n");
  const std::string out = shell(rankwise::test::python() + kScript + " check-cpp " + ckpt + " 2>&1");
  // fc1 and fc2 weight and bias, bn weight, bias and 3 buffers.
  EXPECT_EQ(out, "equal (step 3, 9 entries)\n");
  fs::remove_all(dir);
}

TEST(CheckpointInterop, WeLoadAStateDictSavedByPython) {
  if (!rankwise::test::have_python_torch()) {
    GTEST_SKIP() << "the reference Python (" RANKWISE_PYTHON ") cannot import torch";
  }
  const auto dir = fs::temp_directory_path() / ("rankwise_interop_py_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string sd = (dir / "python_sd.pt").string(), probe = (dir / "probe.pt").string();
  ASSERT_EQ(shell(rankwise::test::python() + kScript + " write " + sd + " " + probe + " 2>&1"), "written\n");
  EXPECT_EQ(shell(kProgram + " read " + sd + " " + probe + " 2>&1"), "equal\n");
  EXPECT_EQ(shell(kProgram + " read-full " + sd + ".full " + probe + " 2>&1"), "equal\n");
  fs::remove_all(dir);
}
