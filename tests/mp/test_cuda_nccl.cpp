// rankwise-test-nproc: 1
// rankwise-test-skippable
// rankwise-test-part: without_gpu CudaNcclWithoutGpu.*
// One rank through NCCL on cuda:0 (InitOptions' default "auto" picks NCCL
// when the rank has a GPU of its own): collectives, barrier, DDP and a
// checkpoint. Skipped without CUDA, where "auto" is Gloo.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>

#include "cuda_test_support.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/device.h"

class CudaNccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
  }
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device gpu{torch::kCUDA, 0};
};

TEST(CudaNcclWithoutGpu, AutoIsGloo) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
  EXPECT_EQ(rankwise::dist::process_group().backend(), "gloo");
  EXPECT_TRUE(rankwise::device().is_cpu());
}

TEST_F(CudaNccl, AutoPicksNcclBoundToThisRanksDevice) {
  EXPECT_EQ(rankwise::dist::process_group().backend(), "cpu:gloo,cuda:nccl");
  EXPECT_EQ(rankwise::device(), gpu);
  // init() made it the current device: a tensor on "cuda" lands there.
  EXPECT_EQ(torch::empty({1}, torch::kCUDA).device(), gpu);
}

TEST_F(CudaNccl, CollectivesOnCuda0) { cuda_test::expect_collectives_on(gpu); }

// CPU tensors go through the Gloo backend beside NCCL.
TEST_F(CudaNccl, CollectivesOnTheCpuToo) { cuda_test::expect_collectives_on(torch::kCPU); }

TEST_F(CudaNccl, DdpOnACudaModule) { cuda_test::expect_ddp_step_on(gpu); }

TEST_F(CudaNccl, CheckpointFromCuda0LoadsOntoCpuAndCuda0) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("rankwise_cuda_nccl_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "c.pt").string();
  rankwise::checkpoint::Checkpoint state;
  const auto w = torch::arange(12, torch::TensorOptions().device(gpu)).reshape({3, 4});
  state.insert("w", w);
  rankwise::checkpoint::save(path, state);  // collective
  const auto on_cpu = rankwise::checkpoint::load(path).at("w").toTensor();
  EXPECT_TRUE(on_cpu.device().is_cpu());
  EXPECT_TRUE(on_cpu.equal(w.cpu()));
  const auto on_gpu = rankwise::checkpoint::load(path, rankwise::device()).at("w").toTensor();
  EXPECT_EQ(on_gpu.device(), gpu);
  EXPECT_TRUE(on_gpu.equal(w));
  rankwise::dist::barrier();
  std::filesystem::remove_all(dir);
}
