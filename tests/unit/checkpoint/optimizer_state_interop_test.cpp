// Optimizer state between C++ and Python, both directions, with the torch of
// the libtorch we were built against (SameTorch) and with the other supported
// version (OtherTorch: 1.13 against a 2.x build and the reverse), for SGD, Adam, AdamW, RMSprop and Adagrad: a run one side
// started and saved (model + optimizer.state_dict(), lr decayed by hand) is
// continued by the other, whose optimizer was built with other
// hyper-parameters; the result equals the starting side's uninterrupted run
// within 1e-6. Protocol: tests/python/optimizer_interop.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "support/shell.h"

namespace fs = std::filesystem;
using rankwise::test::ReferencePython;
using rankwise::test::shell;

namespace {
const std::string kProgram = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_optimizer_interop";
const std::string kScript = std::string(RANKWISE_SOURCE_DIR) + "/tests/python/optimizer_interop.py";

class OptimizerInterop : public ::testing::TestWithParam<ReferencePython> {};
}  // namespace

TEST_P(OptimizerInterop, EachSideContinuesTheOthersRun) {
  const std::string interpreter = GetParam().interpreter;
  if (!rankwise::test::have_python_torch(interpreter)) {
    GTEST_SKIP() << "the reference Python (" << interpreter << ") cannot import torch";
  }
  const auto dir = fs::temp_directory_path() / ("rankwise_optimizer_interop_" + std::string(GetParam().name) +
                                                "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string d = dir.string();
  ASSERT_EQ(shell(kProgram + " start " + d + " 2>&1"), "started\n");
  ASSERT_EQ(shell(rankwise::test::python(interpreter) + kScript + " start " + d + " 2>&1"), "started\n");
  ASSERT_EQ(shell(rankwise::test::python(interpreter) + kScript + " continue " + d + " 2>&1"), "continued\n");
  ASSERT_EQ(shell(kProgram + " continue " + d + " 2>&1"), "continued\n");
  const std::string out = shell(rankwise::test::python(interpreter) + kScript + " compare " + d + " 2>&1; echo exit $?");
  for (const char* kind : {"sgd", "adam", "adamw", "rmsprop", "adagrad"}) {
    for (const char* what : {"python continues c++", "c++ continues python"}) {
      const std::string line = std::string(kind) + ": " + what + ": max abs diff ";
      const auto at = out.find(line);
      ASSERT_NE(at, std::string::npos) << out;
      EXPECT_EQ(out.substr(out.find(' ', at + line.size()), 3), " ok") << out;
    }
  }
  EXPECT_NE(out.find("exit 0"), std::string::npos) << out;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(WithTorch, OptimizerInterop, ::testing::ValuesIn(rankwise::test::kReferencePythons),
                         [](const auto& info) { return rankwise::test::reference_python_name(info.param); });
