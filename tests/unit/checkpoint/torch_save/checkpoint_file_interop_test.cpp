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
#include <fstream>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/error.h"
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

// Files of Python's torch.save holding values libtorch cannot represent: the
// error names the value and says the file is intact (it once said the file
// was truncated or not torch.save's), and a file pickled with protocol 4 says
// how to save it again.
TEST_P(CheckpointInterop, PythonOnlyValuesAreNamed) {
  const std::string d = dir_.string();
  const std::string script =
      "import torch, numpy\n"
      "class Settings: pass\n"
      "torch.save({'tags': {1, 2}}, '" + d + "/set.pt')\n"
      "torch.save({'raw': b'abc'}, '" + d + "/bytes.pt')\n"
      "torch.save({'mean': numpy.zeros(3)}, '" + d + "/numpy.pt')\n"
      "torch.save({'cfg': Settings()}, '" + d + "/class.pt')\n"
      "torch.save({'x': torch.ones(2)}, '" + d + "/protocol4.pt', pickle_protocol=4)\n"
      "print('written')\n";
  std::ofstream(dir_ / "write.py") << script;
  ASSERT_EQ(shell(python() + (dir_ / "write.py").string() + " 2>&1"), "written\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"set.pt", "holds a Python set, which libtorch cannot represent (the file itself is intact)"},
      {"bytes.pt", "holds a Python bytes value, which libtorch cannot represent"},
      {"numpy.pt", "holds a numpy value (an array, scalar or dtype), which libtorch cannot represent"},
      {"class.pt", "holds an object of the class Settings defined in the saving script (__main__)"},
      {"protocol4.pt", "was pickled with pickle protocol 4 or later, which libtorch does not read"}};
  for (const auto& [file, expected] : cases) {
    std::string error = "(no CheckpointError)";
    try {
      rankwise::checkpoint::load(d + "/" + file);
    } catch (const rankwise::CheckpointError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("'" + d + "/" + file + "' " + expected), std::string::npos) << error;
  }
}

// 70,000 storages: more zip entries than a zip's 16-bit counts hold, so the
// writer ends the file with zip64 end records (APPNOTE.TXT 4.3.14-4.3.15).
// rankwise reads it back, and so do Python's zipfile (every entry's CRC-32)
// and torch.load.
TEST_P(CheckpointInterop, SeventyThousandStoragesUseZip64EndRecords) {
  const std::string path = (dir_ / "many.pt").string();
  constexpr int64_t kCount = 70000;
  c10::List<at::Tensor> list;
  for (int64_t i = 0; i < kCount; ++i) list.push_back(at::full({1}, i, at::kLong));
  rankwise::checkpoint::Checkpoint state;
  state.insert("many", list);
  rankwise::checkpoint::save(path, state);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find(std::string("PK\x06\x06", 4)), std::string::npos) << "no zip64 end record";
  EXPECT_NE(bytes.find(std::string("PK\x06\x07", 4)), std::string::npos) << "no zip64 end locator";
  EXPECT_TRUE(rankwise::checkpoint::verify(path));
  const auto loaded = rankwise::checkpoint::load(path).at("many").toList();
  ASSERT_EQ(static_cast<int64_t>(loaded.size()), kCount);
  for (int64_t i = 0; i < kCount; i += 6999) EXPECT_EQ(loaded.get(i).toTensor().item<int64_t>(), i);
  // The storages' entries are <archive>/data/<i>; the list of tensors loads weights-only (on 1.13 too).
  const std::string out = shell(python() + "-c \"import torch, zipfile; z = zipfile.ZipFile('" + path +
                                "'); print(sum(n.split('/')[-2] == 'data' for n in z.namelist()), z.testzip()); v = "
                                "torch.load('" + path + "', weights_only=True)['many']; print(len(v), sum(int(t) "
                                "for t in v))\" 2>&1");
  EXPECT_EQ(out, std::to_string(kCount) + " None\n" + std::to_string(kCount) + " " +
                     std::to_string(kCount * (kCount - 1) / 2) + "\n");
}

INSTANTIATE_TEST_SUITE_P(WithTorch, CheckpointInterop, ::testing::ValuesIn(rankwise::test::kReferencePythons),
                         [](const auto& info) { return rankwise::test::reference_python_name(info.param); });
