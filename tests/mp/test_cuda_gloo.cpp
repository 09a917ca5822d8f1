// rankwise-test-nproc: 2
// rankwise-test-skippable
// Two ranks sharing one GPU (cuda:0) through Gloo on CUDA tensors: NCCL
// needs a GPU per rank, Gloo does not. Collectives and DDP. Skipped without
// CUDA.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "cuda_test_support.h"

class CudaGloo : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rankwise::dist::init(rankwise::dist::InitOptions().backend("gloo").timeout(std::chrono::seconds(60)));
  }
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device gpu{torch::kCUDA, 0};
};

TEST_F(CudaGloo, BackendIsGloo) { EXPECT_EQ(rankwise::dist::process_group().backend(), "gloo"); }

TEST_F(CudaGloo, CollectivesOnASharedGpu) { cuda_test::expect_collectives_on(gpu); }

TEST_F(CudaGloo, DdpOnASharedGpu) { cuda_test::expect_ddp_step_on(gpu); }
