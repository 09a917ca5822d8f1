// CheckpointManager::save_async without a process group: the same bytes as
// save(), a failed background write raised at the next call with the latest
// checkpoint kept, 100 saves in flat memory, and a destructor that waits.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/error.h"
#include "support/file_size_limit.h"

namespace fs = std::filesystem;
using rankwise::checkpoint::Checkpoint;
using rankwise::checkpoint::CheckpointManager;
using rankwise::checkpoint::CheckpointManagerOptions;
using rankwise::test::FileSizeLimit;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("rankwise_async_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

Checkpoint payload(int64_t step, int64_t floats) {
  Checkpoint c;
  c.insert("step", step);
  c.insert("payload", torch::full({floats}, static_cast<float>(step)));
  return c;
}

// Whether two loaded values are the same, bit for bit: every tensor's dtype,
// sizes, strides and bytes, every other value by ==.
bool bitwise_equal(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    const auto &x = a.toTensor(), &y = b.toTensor();
    return x.dtype() == y.dtype() && x.sizes() == y.sizes() && x.strides() == y.strides() &&
           x.storage_offset() == y.storage_offset() && x.storage().nbytes() == y.storage().nbytes() &&
           std::memcmp(x.storage().data(), y.storage().data(), x.storage().nbytes()) == 0;
  }
  if (a.isGenericDict() && b.isGenericDict()) {
    const auto x = a.toGenericDict(), y = b.toGenericDict();
    if (x.size() != y.size()) return false;
    for (auto i = x.begin(), j = y.begin(); i != x.end(); ++i, ++j) {
      if (i->key() != j->key() || !bitwise_equal(i->value(), j->value())) return false;
    }
    return true;
  }
  if (a.isList() && b.isList()) {
    const auto x = a.toList(), y = b.toList();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!bitwise_equal(x.get(i), y.get(i))) return false;
    }
    return true;
  }
  return a == b;
}

// Resident memory of this process, in bytes.
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

// Not byte for byte: libtorch's pickler memoizes an object only when
// something else holds it too (use_count > 1), so the memo opcodes of the
// pickle differ between the caller's state and the snapshot's copy. Every
// tensor record and every value read back are the same.
TEST(AsyncSave, WritesAFileThatLoadsBitwiseAsSavesDoes) {
  // A model and Adam after two steps: parameters, views sharing a storage,
  // integer and float tensors, nested dicts and lists.
  torch::manual_seed(1);
  torch::nn::Linear model(8, 4);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  for (int i = 0; i < 2; ++i) {
    adam.zero_grad();
    model(torch::randn({3, 8})).sum().backward();
    adam.step();
  }
  Checkpoint state;
  state.insert("model", rankwise::checkpoint::state_dict(*model));
  state.insert("optimizer", rankwise::checkpoint::optimizer_state_dict(adam));
  state.insert("weight_t", model->weight.t());
  state.insert("step", int64_t{2});
  const auto sync_dir = fresh_dir("sync"), async_dir = fresh_dir("async");
  CheckpointManager sync(CheckpointManagerOptions(sync_dir.string()));
  CheckpointManager async(CheckpointManagerOptions(async_dir.string()));
  const std::string a = sync.save(state, 2);
  const std::string b = async.save_async(state, 2);
  async.wait();
  const auto from_sync = rankwise::checkpoint::load(a), from_async = rankwise::checkpoint::load(b);
  EXPECT_TRUE(bitwise_equal(from_sync.dict(), from_async.dict()));
  EXPECT_EQ(from_async.keys(), state.keys());
  // The transposed view still shares the weight's storage.
  EXPECT_TRUE(from_async.at("weight_t").toTensor().storage().is_alias_of(
      from_async.at("model").toGenericDict().at("weight").toTensor().storage()));
  EXPECT_EQ(*async.latest(), b);
  fs::remove_all(sync_dir);
  fs::remove_all(async_dir);
}

TEST(AsyncSave, AFailedWriteIsRaisedAtTheNextCallAndTheLatestIsKept) {
  const auto dir = fresh_dir("full");
  CheckpointManager manager(CheckpointManagerOptions(dir.string()).keep_last(2));
  manager.save_async(payload(1, 16), 1);
  manager.wait();
  std::string failed;
  {
    FileSizeLimit full(64 << 10);
    failed = manager.save_async(payload(2, 1 << 18), 2);  // 1 MiB: cannot be written
    try {
      manager.save_async(payload(3, 16), 3);
      ADD_FAILURE() << "the failed write was not raised";
    } catch (const rankwise::CheckpointError& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("the asynchronous save of '" + failed + "' failed: "), std::string::npos) << text;
      EXPECT_NE(text.find("File too large"), std::string::npos) << text;
      EXPECT_NE(text.find("the checkpoint before it, if any, stays latest"), std::string::npos) << text;
    }
    EXPECT_EQ(manager.load_latest()->at("step").toInt(), 1);
    // Raised by wait() too.
    manager.save_async(payload(4, 1 << 18), 4);
    EXPECT_THROW(manager.wait(), rankwise::CheckpointError);
  }
  EXPECT_EQ(manager.load_latest()->at("step").toInt(), 1);
  for (auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  // The failures are spent: the next save works.
  manager.save_async(payload(5, 16), 5);
  manager.wait();
  EXPECT_EQ(manager.load_latest()->at("step").toInt(), 5);
  fs::remove_all(dir);
}

TEST(AsyncSave, AHundredSavesKeepTwoInFlatMemory) {
  const auto dir = fresh_dir("hundred");
  CheckpointManager manager(CheckpointManagerOptions(dir.string()).keep_last(2));
  Checkpoint state = payload(0, 1 << 20);  // 4 MiB
  auto tensor = state.at("payload").toTensor();
  int64_t after_ten = 0;
  for (int64_t step = 1; step <= 100; ++step) {
    tensor.fill_(static_cast<float>(step));
    state.insert("step", step);
    manager.save_async(state, step);
    if (step == 10) after_ten = resident_bytes();
  }
  manager.wait();
  // One leaked 4 MiB copy per save would be 360 MiB; allow 2 MiB of noise.
  EXPECT_LT(resident_bytes() - after_ten, 2 << 20);
  EXPECT_EQ(manager.checkpoints().size(), 2u);
  const auto last = manager.load_latest();
  EXPECT_EQ(last->at("step").toInt(), 100);
  EXPECT_TRUE(torch::equal(last->at("payload").toTensor(), torch::full({1 << 20}, 100.0f)));
  fs::remove_all(dir);
}

TEST(AsyncSave, TheDestructorWaitsForTheSaveInFlight) {
  const auto dir = fresh_dir("destructor");
  std::string path;
  {
    CheckpointManager manager(CheckpointManagerOptions(dir.string()));
    path = manager.save_async(payload(3, 1 << 20), 3);
  }
  CheckpointManager reopened(CheckpointManagerOptions(dir.string()));
  EXPECT_EQ(reopened.latest(), path);
  fs::remove_all(dir);
}

// A failed save that nobody waited for must not end the run as a success:
// rank 0 names it and exits with status 1.
TEST(AsyncSaveDeathTest, AManagerDestroyedWithAFailedSaveExitsWithStatusOne) {
  const auto dir = fresh_dir("unwaited");
  auto run = [&] {
    FileSizeLimit full(64 << 10);  // outlives the manager's wait for the write
    CheckpointManager manager(CheckpointManagerOptions(dir.string()));
    manager.save_async(payload(2, 1 << 18), 2);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(1),
              "the asynchronous save of '.*checkpoint-0000000002.pt' failed: .*destroyed without wait\\(\\)");
  fs::remove_all(dir);
}
