// ShardedCheckpointManager::save_async without a process group (one rank):
// the same bytes as save(), a failed background write raised at the next
// call with the latest checkpoint kept, 100 saves in flat memory with two
// left, and a destructor that publishes, or exits 1 on a failure. The
// multi-rank cases (kills at each point, a full disk on one rank) are in
// sharded_manager_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "rankwise/checkpoint/sharded_manager.h"
#include "rankwise/error.h"
#include "support/file_size_limit.h"

namespace fs = std::filesystem;
using rankwise::checkpoint::CheckpointManagerOptions;
using rankwise::checkpoint::ObjectEntry;
using rankwise::checkpoint::ShardedCheckpointManager;
using rankwise::checkpoint::ShardedState;
using rankwise::checkpoint::ShardedTensor;
using rankwise::test::FileSizeLimit;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("rankwise_sharded_async_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every kind of entry: rows of a larger tensor, a non-contiguous chunk, a flat shard, a replicated
// tensor, objects (a list, shared by reference, and a number).
ShardedState mixed_state(const at::Tensor& big, const at::Tensor& flat, const at::Tensor& replicated,
                         const c10::impl::GenericList& betas) {
  ShardedState state;
  state.emplace("rows", ShardedTensor({3, 8}, at::kFloat, {{{0, 0}, big.narrow(0, 2, 3)}}));
  state.emplace("t", ShardedTensor({4, 3}, at::kDouble,
                                   {{{0, 0}, at::arange(12, at::kDouble).reshape({3, 4}).t()}}));
  state.emplace("flat", rankwise::checkpoint::shard_flat(flat, 0, 1));
  state.emplace("replicated", replicated);
  state.emplace("betas", ObjectEntry{betas});
  state.emplace("step", ObjectEntry{int64_t{7}});
  return state;
}

ShardedState payload(int64_t step, int64_t floats) {
  ShardedState state;
  state.emplace("w", rankwise::checkpoint::shard_rows(at::full({floats}, static_cast<float>(step)), 0, 1));
  return state;
}

float first_value(const std::string& dir, int64_t floats) {
  auto state = payload(0, floats);
  rankwise::checkpoint::load_sharded(dir, state, rankwise::checkpoint::ShardedLoadOptions().strict(false));
  const auto data = std::get<ShardedTensor>(state.at("w")).chunks()[0].data;
  const float first = data[0].item<float>();
  return at::equal(data, at::full_like(data, first)) ? first : -12345.0f;  // a mixed payload: no value
}

// Resident memory of this process, in bytes.
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

// Byte for byte: each chunk is its own torch.save record of the chunk's
// elements, written from the copy exactly as from the caller's tensor, and
// objects are pickled by value, so no pickler memo can tell them apart.
TEST(ShardedAsyncSave, WritesTheSameBytesAsASaveOfTheSameState) {
  auto big = at::arange(80, at::kFloat).reshape({10, 8});
  auto flat = at::arange(10, at::kLong);
  auto replicated = at::arange(3, at::kFloat).to(at::kBFloat16);
  c10::impl::GenericList betas(c10::AnyType::get());
  betas.push_back(0.9);
  betas.push_back(0.999);
  const ShardedState state = mixed_state(big, flat, replicated, betas);
  const auto sync_root = fresh_dir("sync"), async_root = fresh_dir("async");
  ShardedCheckpointManager sync(CheckpointManagerOptions(sync_root.string()));
  ShardedCheckpointManager async(CheckpointManagerOptions(async_root.string()));
  const std::string a = sync.save(state, 7);
  const std::string b = async.save_async(state, 7);
  // Training goes on before the write is waited for: the checkpoint holds the state at the call.
  big.fill_(-1);
  flat.fill_(-1);
  replicated.fill_(-1);
  betas.set(0, 0.5);
  async.wait();
  EXPECT_EQ(async.latest(), b);
  for (const char* name : {".metadata", ".rankwise-manifest.json", "__0_0.distcp"}) {
    const std::string x = bytes_of(fs::path(a) / name), y = bytes_of(fs::path(b) / name);
    EXPECT_FALSE(x.empty()) << name;
    EXPECT_TRUE(x == y) << name << " differs";
  }
  auto loaded = mixed_state(at::zeros({10, 8}), at::zeros({10}, at::kLong), at::zeros({3}, at::kBFloat16),
                            c10::impl::GenericList(c10::AnyType::get()));
  rankwise::checkpoint::load_sharded(b, loaded);
  EXPECT_TRUE(at::equal(std::get<ShardedTensor>(loaded.at("rows")).chunks()[0].data,
                        at::arange(80, at::kFloat).reshape({10, 8}).narrow(0, 2, 3)));
  EXPECT_TRUE(at::equal(std::get<at::Tensor>(loaded.at("replicated")), at::arange(3, at::kFloat).to(at::kBFloat16)));
  EXPECT_EQ(std::get<ObjectEntry>(loaded.at("betas")).value.toList().get(0).toDouble(), 0.9);
  fs::remove_all(sync_root);
  fs::remove_all(async_root);
}

TEST(ShardedAsyncSave, AFailedWriteIsRaisedAtTheNextCallAndTheLatestIsKept) {
  const auto root = fresh_dir("full");
  ShardedCheckpointManager manager(CheckpointManagerOptions(root.string()).keep_last(2));
  manager.save_async(payload(1, 16), 1);
  manager.wait();
  {
    FileSizeLimit full(64 << 10);
    const std::string failed = manager.save_async(payload(2, 1 << 18), 2);  // 1 MiB: cannot be written
    try {
      manager.save_async(payload(3, 16), 3);
      ADD_FAILURE() << "the failed write was not raised";
    } catch (const rankwise::CheckpointError& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("the asynchronous save of '" + failed + "' failed: "), std::string::npos) << text;
      EXPECT_NE(text.find("writing the data files on rank 0"), std::string::npos) << text;
      EXPECT_NE(text.find("File too large"), std::string::npos) << text;
      EXPECT_NE(text.find("the checkpoint before it, if any, stays latest"), std::string::npos) << text;
    }
    EXPECT_EQ(first_value(*manager.latest(), 16), 1.0f);
    // Raised by wait() too.
    manager.save_async(payload(4, 1 << 18), 4);
    EXPECT_THROW(manager.wait(), rankwise::CheckpointError);
  }
  EXPECT_EQ(first_value(*manager.latest(), 16), 1.0f);
  EXPECT_EQ(manager.checkpoints().size(), 1u);
  for (auto& e : fs::directory_iterator(root)) {
    EXPECT_EQ(e.path().filename().string().find("rankwise-tmp"), std::string::npos) << e.path();
  }
  // The failures are spent: the next save works.
  manager.save_async(payload(5, 16), 5);
  manager.wait();
  EXPECT_EQ(first_value(*manager.latest(), 16), 5.0f);
  fs::remove_all(root);
}

TEST(ShardedAsyncSave, AHundredSavesKeepTwoInFlatMemory) {
  const auto root = fresh_dir("hundred");
  ShardedCheckpointManager manager(CheckpointManagerOptions(root.string()).keep_last(2));
  auto tensor = at::zeros({1 << 20});  // 4 MiB
  ShardedState state;
  state.emplace("w", rankwise::checkpoint::shard_rows(tensor, 0, 1));
  int64_t after_ten = 0;
  for (int64_t step = 1; step <= 100; ++step) {
    tensor.fill_(static_cast<float>(step));
    manager.save_async(state, step);
    const auto timings = manager.last_timings();
    EXPECT_GE(timings.blocked_ms, timings.waited_ms);
    if (step == 10) after_ten = resident_bytes();
  }
  manager.wait();
  // One leaked 4 MiB copy per save would be 360 MiB; allow 2 MiB of noise.
  EXPECT_LT(resident_bytes() - after_ten, 2 << 20);
  EXPECT_EQ(manager.checkpoints(),
            (std::vector<std::string>{(root / "checkpoint-0000000099").string(), (root / "checkpoint-0000000100").string()}));
  EXPECT_EQ(first_value(*manager.latest(), 1 << 20), 100.0f);
  fs::remove_all(root);
}

TEST(ShardedAsyncSave, TheDestructorPublishesTheSaveInFlight) {
  const auto root = fresh_dir("destructor");
  std::string path;
  {
    ShardedCheckpointManager manager(CheckpointManagerOptions(root.string()));
    path = manager.save_async(payload(3, 1 << 18), 3);
    EXPECT_FALSE(fs::exists(path));  // published at the next call, not before
  }
  ShardedCheckpointManager reopened(CheckpointManagerOptions(root.string()));
  EXPECT_EQ(reopened.latest(), path);
  EXPECT_EQ(first_value(path, 1 << 18), 3.0f);
  fs::remove_all(root);
}

// A failed save that nobody waited for must not end the run as a success.
TEST(ShardedAsyncSaveDeathTest, AManagerDestroyedWithAFailedSaveExitsWithStatusOne) {
  const auto root = fresh_dir("unwaited");
  auto run = [&] {
    FileSizeLimit full(64 << 10);  // outlives the manager's wait for the write
    ShardedCheckpointManager manager(CheckpointManagerOptions(root.string()));
    manager.save_async(payload(2, 1 << 18), 2);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(1),
              "the asynchronous save of '.*checkpoint-0000000002' failed: .*destroyed without wait\\(\\)");
  fs::remove_all(root);
}
