// rankwise-test-nproc: 4
// save_sharded() to node-local disks and load_sharded_collective() across
// them, on one machine: ranks 0-1 play node 0 and ranks 2-3 node 1, each
// "node" working in a directory of its own and naming the checkpoint by a
// relative path, so that the same path is another disk on each node (as
// mp.collective_load does for replicated files). tests/e2e/sharded_netns.sh
// runs the same through two network namespaces with bind-mounted disks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace fs = std::filesystem;

namespace {

rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}

fs::path base_dir(const std::string& name) {
  return fs::temp_directory_path() / ("rankwise_mp_nodelocal_" + *rankwise::get_env("MASTER_PORT") + "_" + name);
}

// Makes base/<place> (fresh when `fresh`) the current directory of this rank.
void enter(const fs::path& base, const std::string& place) {
  fs::create_directories(base / place);
  fs::current_path(base / place);
}

at::Tensor weights(double shift) { return torch::arange(30, torch::kFloat32).reshape({10, 3}) * 0.5 + shift; }
at::Tensor counts(int64_t shift) { return torch::arange(6, torch::kInt64) * int64_t{1000000000007} + shift; }
at::Tensor bias(double shift) { return torch::arange(6, torch::kFloat64).reshape({2, 3}) - shift; }

// The state of rank `as` of 4 (its rows of `weights`, its flat piece of `counts`).
rankwise::checkpoint::ShardedState state_of(double shift, int as) {
  rankwise::checkpoint::ShardedState s;
  s.emplace("weights", rankwise::checkpoint::shard_rows(weights(shift), as, 4));
  s.emplace("counts", rankwise::checkpoint::shard_flat(counts(static_cast<int64_t>(shift)), as, 4));
  s.emplace("bias", bias(shift));
  return s;
}

rankwise::checkpoint::ShardedState zeros_of(int as, int world) {
  rankwise::checkpoint::ShardedState s;
  s.emplace("weights", rankwise::checkpoint::zeros_sharded_rows({10, 3}, torch::kFloat32, as, world));
  s.emplace("counts", rankwise::checkpoint::shard_flat(torch::zeros({6}, torch::kInt64), as, world));
  s.emplace("bias", torch::zeros({2, 3}, torch::kFloat64));
  return s;
}

void expect_values(const rankwise::checkpoint::ShardedState& s, double shift, int as, int world) {
  const auto& w = std::get<rankwise::checkpoint::ShardedTensor>(s.at("weights"));
  const auto& c = std::get<rankwise::checkpoint::ShardedTensor>(s.at("counts"));
  const auto want_w = rankwise::checkpoint::shard_rows(weights(shift), as, world);
  const auto want_c = rankwise::checkpoint::shard_flat(counts(static_cast<int64_t>(shift)), as, world);
  EXPECT_TRUE(torch::equal(w.chunks()[0].data, want_w.chunks()[0].data)) << "rank " << group().rank();
  EXPECT_TRUE(torch::equal(c.chunks()[0].data, want_c.chunks()[0].data)) << "rank " << group().rank();
  EXPECT_TRUE(torch::equal(std::get<at::Tensor>(s.at("bias")), bias(shift))) << "rank " << group().rank();
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// Each node's ranks write to its own disk; the manifest on both says where each file is;
// a load in another layout gets the bytes on the other node through the process group.
TEST(ShardedNodeLocal, EachNodeHoldsItsShardsAndLoadsReadAcrossNodes) {
  auto& pg = group();
  ASSERT_EQ(pg.world_size(), 4);
  const auto base = base_dir("disks");
  const int node = pg.rank() / 2;
  enter(base, "node" + std::to_string(node));
  rankwise::checkpoint::save_sharded("ckpt", state_of(3.0, pg.rank()));
  pg.barrier();
  if (pg.rank() == 0) {
    for (int n : {0, 1}) {
      const auto dir = base / ("node" + std::to_string(n)) / "ckpt";
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(fs::exists(dir / ("__" + std::to_string(r) + "_0.distcp")), r / 2 == n) << dir << " rank " << r;
      }
      EXPECT_TRUE(fs::exists(dir / ".metadata")) << dir;
      EXPECT_FALSE(fs::exists(dir / ".rankwise-storage")) << dir;
      for (const auto& e : fs::directory_iterator(dir.parent_path())) {
        EXPECT_EQ(e.path().filename().string().find("rankwise-tmp"), std::string::npos) << e.path();
      }
    }
    const std::string m0 = read_all(base / "node0/ckpt/.rankwise-manifest.json");
    EXPECT_EQ(m0, read_all(base / "node1/ckpt/.rankwise-manifest.json"));
    EXPECT_EQ(read_all(base / "node0/ckpt/.metadata"), read_all(base / "node1/ckpt/.metadata"));
    const auto nodes = nlohmann::json::parse(m0).at("nodes");
    ASSERT_EQ(nodes.size(), 2u) << m0;
    EXPECT_EQ(nodes[0].at("leader"), 0);
    EXPECT_EQ(nodes[0].at("ranks"), nlohmann::json({0, 1}));
    EXPECT_EQ(nodes[0].at("files"), nlohmann::json({"__0_0.distcp", "__1_0.distcp"}));
    // Node 1's leader is the rank that created its directory first.
    EXPECT_TRUE(nodes[1].at("leader") == 2 || nodes[1].at("leader") == 3) << m0;
    EXPECT_EQ(nodes[1].at("ranks"), nlohmann::json({2, 3}));
    EXPECT_EQ(nodes[1].at("files"), nlohmann::json({"__2_0.distcp", "__3_0.distcp"}));
  }

  // A rank alone cannot read the other node's files.
  if (pg.rank() == 2) {
    auto s = zeros_of(0, 4);
    EXPECT_THROW(rankwise::checkpoint::load_sharded("ckpt", s), rankwise::CheckpointError);
  }
  // Reversed: rank r loads rank (3 - r)'s pieces, which are on the other node.
  auto reversed = zeros_of(3 - pg.rank(), 4);
  testing::internal::CaptureStderr();
  rankwise::checkpoint::load_sharded_collective("ckpt", reversed);
  const std::string err = testing::internal::GetCapturedStderr();
  expect_values(reversed, 3.0, 3 - pg.rank(), 4);
  if (pg.rank() == 0) {
    // Storage bytes each rank needs from the other node (torch.chunk's rows 3,3,3,1 of 3 floats and flat
    // pieces 2,2,2,0 of int64; bias, 6 doubles, is in rank 0's file): rank 0 row 9; rank 1 rows 6-8 and
    // counts 4-5; ranks 2 and 3 three rows, two counts and the bias.
    EXPECT_NE(err.find("(rank 0 12 bytes, rank 1 52 bytes, rank 2 100 bytes, rank 3 100 bytes)"), std::string::npos)
        << err;
  }

  // Another layout: node 0 holds rank 0 only, node 1 ranks 1 and 2, and rank 3 is on a node that has
  // never seen the checkpoint (node_local: no wait); each loads a third.
  pg.barrier();
  const std::string place = pg.rank() == 0 ? "node0" : pg.rank() == 3 ? "node2" : "node1";
  enter(base, place);
  auto third = zeros_of(std::min(pg.rank(), 2), 3);
  const auto started = std::chrono::steady_clock::now();
  rankwise::checkpoint::load_sharded_collective("ckpt", third, rankwise::checkpoint::CollectiveLoadOptions().node_local(true));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  expect_values(third, 3.0, std::min(pg.rank(), 2), 3);

  // A subset of the keys plus one of the state's own, across the nodes
  // (ShardedLoadOptions): "counts" only, and an object the checkpoint lacks.
  rankwise::checkpoint::ShardedState subset;
  subset.emplace("counts", rankwise::checkpoint::shard_flat(torch::zeros({6}, torch::kInt64), 3 - pg.rank(), 4));
  subset.emplace("step", rankwise::checkpoint::ObjectEntry{int64_t{-1}});
  rankwise::checkpoint::load_sharded_collective("ckpt", subset, rankwise::checkpoint::CollectiveLoadOptions().node_local(true),
                                    rankwise::checkpoint::ShardedLoadOptions().strict(false).allow_partial_load(true));
  EXPECT_TRUE(torch::equal(std::get<rankwise::checkpoint::ShardedTensor>(subset.at("counts")).chunks()[0].data,
                           rankwise::checkpoint::shard_flat(counts(3), 3 - pg.rank(), 4).chunks()[0].data))
      << "rank " << pg.rank();
  EXPECT_EQ(std::get<rankwise::checkpoint::ObjectEntry>(subset.at("step")).value.toInt(), -1);
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(base);
}

// A data file that no rank sees: every rank fails, naming it and who wrote it.
TEST(ShardedNodeLocal, AFileNoRankSeesIsNamedWithWhereItWasWritten) {
  auto& pg = group();
  const auto base = base_dir("lost");
  enter(base, "node" + std::to_string(pg.rank() / 2));
  rankwise::checkpoint::save_sharded("ckpt", state_of(1.0, pg.rank()));
  pg.barrier();
  if (pg.rank() == 3) fs::remove(fs::path("ckpt") / "__3_0.distcp");
  pg.barrier();
  auto s = zeros_of(pg.rank(), 4);
  try {
    rankwise::checkpoint::load_sharded_collective("ckpt", s, rankwise::checkpoint::CollectiveLoadOptions().node_local(true));
    ADD_FAILURE() << "no error on rank " << pg.rank();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("no rank sees these data files whole: '__3_0.distcp' (written by rank 3 on host"), std::string::npos)
        << text;
    EXPECT_NE(text.find("needed by rank 3"), std::string::npos) << text;
  }
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(base);
}

// One shared directory whose view on rank 3 is stale (an older checkpoint) for 600 ms: rank 3 waits,
// then reads its own view, and nothing is sent; the manifest has one storage node.
TEST(ShardedNodeLocal, SharedDirectoryWithAStaleViewWaitsThenReadsItsOwn) {
  auto& pg = group();
  const auto base = base_dir("shared");
  enter(base, "shared");
  rankwise::checkpoint::save_sharded("ckpt", state_of(1.0, pg.rank()));
  pg.barrier();
  if (pg.rank() == 0) {
    fs::create_directories(base / "stale");
    fs::copy(base / "shared/ckpt", base / "stale/ckpt");
    const auto nodes = nlohmann::json::parse(read_all(base / "shared/ckpt/.rankwise-manifest.json")).at("nodes");
    ASSERT_EQ(nodes.size(), 1u);
    EXPECT_EQ(nodes[0].at("ranks"), nlohmann::json({0, 1, 2, 3}));
  }
  pg.barrier();
  rankwise::checkpoint::save_sharded("ckpt", state_of(2.0, pg.rank()));
  pg.barrier();
  std::thread refresh;
  if (pg.rank() == 3) {
    enter(base, "stale");
    refresh = std::thread([base] {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      fs::copy(base / "shared/ckpt", base / "stale/new");
      fs::remove_all(base / "stale/ckpt");
      fs::rename(base / "stale/new", base / "stale/ckpt");
    });
  }
  auto s = zeros_of(3 - pg.rank(), 4);
  testing::internal::CaptureStderr();
  const auto started = std::chrono::steady_clock::now();
  rankwise::checkpoint::load_sharded_collective("ckpt", s, rankwise::checkpoint::CollectiveLoadOptions().stale_timeout(std::chrono::seconds(20)));
  const auto waited = std::chrono::steady_clock::now() - started;
  const std::string err = testing::internal::GetCapturedStderr();
  if (refresh.joinable()) refresh.join();
  expect_values(s, 2.0, 3 - pg.rank(), 4);
  if (pg.rank() == 3) EXPECT_GE(waited, std::chrono::milliseconds(500));
  if (pg.rank() == 0) EXPECT_EQ(err.find("were sent to it"), std::string::npos) << err;
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(base);
}

// A flipped byte in the replicated tensor every rank reads: every rank fails
// with the same text, which the error gives once, after the list of ranks
// (it once repeated it for each rank, and without the rank's own prefix).
TEST(ShardedNodeLocal, TheSameFailureOnEveryRankIsReportedOnce) {
  auto& pg = group();
  const auto base = base_dir("same");
  enter(base, "shared");
  rankwise::checkpoint::save_sharded("ckpt", state_of(1.0, pg.rank()));
  pg.barrier();
  if (pg.rank() == 0) {
    const at::Tensor b = bias(1.0).contiguous();
    const std::string needle(static_cast<const char*>(b.data_ptr()), b.nbytes());
    int flipped = 0;
    for (const auto& entry : fs::directory_iterator("ckpt")) {
      std::string bytes = read_all(entry.path());
      const auto at = bytes.find(needle);
      if (at == std::string::npos) continue;
      bytes[at + 3] ^= 0x10;
      std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << bytes;
      ++flipped;
    }
    ASSERT_EQ(flipped, 1);
  }
  pg.barrier();
  auto s = zeros_of(pg.rank(), 4);
  try {
    rankwise::checkpoint::load_sharded_collective("ckpt", s);
    ADD_FAILURE() << "no error on rank " << pg.rank();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("failed on ranks 0, 1, 2, 3: "), std::string::npos) << text;
    const auto first = text.find("'bias'");
    EXPECT_NE(first, std::string::npos) << text;
    EXPECT_EQ(text.find("'bias'", first + 1), std::string::npos) << "repeated: " << text;
  }
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(base);
}

// A manifest that names another data file than .metadata (edited by hand, or
// damaged): the ranks that find out fail inside load_sharded_collective's
// protocol, so every rank raises it and the process group stays in step: a
// load of another checkpoint right after works on every rank.
TEST(ShardedNodeLocal, AFailureOnSomeRanksLeavesTheCollectivesInStep) {
  auto& pg = group();
  const auto base = base_dir("instep");
  enter(base, "shared");
  rankwise::checkpoint::save_sharded("good", state_of(1.0, pg.rank()));
  rankwise::checkpoint::save_sharded("bad", state_of(2.0, pg.rank()));
  pg.barrier();
  if (pg.rank() == 0) {
    std::string manifest = read_all("bad/.rankwise-manifest.json");
    const auto at = manifest.find("__3_0.distcp");
    ASSERT_NE(at, std::string::npos);
    manifest.replace(at, 12, "__9_0.distcp");
    std::ofstream("bad/.rankwise-manifest.json", std::ios::trunc) << manifest;
  }
  pg.barrier();
  auto s = zeros_of(pg.rank(), 4);
  try {
    rankwise::checkpoint::load_sharded_collective("bad", s);
    ADD_FAILURE() << "no error on rank " << pg.rank();
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(".metadata and the manifest disagree"), std::string::npos) << e.what();
  }
  auto good = zeros_of(pg.rank(), 4);
  rankwise::checkpoint::load_sharded_collective("good", good);
  expect_values(good, 1.0, pg.rank(), 4);
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(base);
}

// A data file truncated in a shared directory: the error says the file is
// shorter than .metadata says (it once said only that no rank sees it).
TEST(ShardedNodeLocal, ATruncatedDataFileIsCalledTruncated) {
  auto& pg = group();
  const auto base = base_dir("short");
  enter(base, "shared");
  rankwise::checkpoint::save_sharded("ckpt", state_of(1.0, pg.rank()));
  pg.barrier();
  if (pg.rank() == 0) fs::resize_file("ckpt/__1_0.distcp", 100);
  pg.barrier();
  auto s = zeros_of(pg.rank(), 4);
  try {
    rankwise::checkpoint::load_sharded_collective("ckpt", s);
    ADD_FAILURE() << "no error on rank " << pg.rank();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("'__1_0.distcp' (written by rank 1 on host"), std::string::npos) << text;
    EXPECT_NE(text.find("(ranks 0, 1, 2, 3 see it 100 bytes long, but '.metadata' points to bytes up to "),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("is truncated (or an older copy of a stale view): load an earlier checkpoint"),
              std::string::npos)
        << text;
  }
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(base);
}

// Every rank passes an undefined replicated tensor: the error says so once,
// after the ranks (it once repeated each rank's text and advised .cpu()).
TEST(ShardedNodeLocal, AnUndefinedTensorOnEveryRankIsReportedOnce) {
  auto& pg = group();
  const auto base = base_dir("undef");
  enter(base, "shared");
  auto s = state_of(1.0, pg.rank());
  s.at("bias") = at::Tensor();
  try {
    rankwise::checkpoint::save_sharded("ckpt", s);
    ADD_FAILURE() << "no error on rank " << pg.rank();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("failed while writing the data files on ranks 0, 1, 2, 3: save_sharded: replicated tensor "
                        "'bias' is undefined (a default-constructed at::Tensor); give it a value or leave it out. "
                        "Nothing was published"),
              std::string::npos)
        << text;
  }
  EXPECT_FALSE(fs::exists("ckpt"));
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(base);
}
