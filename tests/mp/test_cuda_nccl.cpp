// rankwise-test-nproc: 1
// rankwise-test-skippable
// rankwise-test-part: without_gpu CudaNcclWithoutGpu.*
// One rank through NCCL on cuda:0 (InitOptions' default "auto" picks NCCL
// when the rank has a GPU of its own): collectives, barrier, DDP and a
// checkpoint. Skipped without CUDA, where "auto" is Gloo.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "cuda_test_support.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/device.h"
#include "rankwise/diag/flight_recorder.h"
#include "rankwise/dist/process_group.h"

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

namespace {

rankwise::diag::CollectiveRecord recorded(uint64_t sequence) {
  for (const auto& entry : rankwise::dist::process_group().flight_recorder().entries()) {
    if (entry.sequence == sequence) return entry;
  }
  ADD_FAILURE() << "collective #" << sequence << " is not in the flight recorder";
  return {};
}

}  // namespace

// ProcessGroupNCCL completes a work's future when its kernels are enqueued;
// the flight recorder must end the collective when the GPU has run it, so
// that a rank stuck in a DDP all_reduce shows in it.
TEST_F(CudaNccl, TheFlightRecorderEndsACollectiveWhenTheGpuHasRunIt) {
  auto& group = rankwise::dist::process_group();
  const auto a = torch::randn({4096, 4096}, torch::TensorOptions().device(gpu));
  torch::cuda::synchronize();
  const auto launched = std::chrono::system_clock::now();
  auto busy = a;
  for (int i = 0; i < 100; ++i) busy = torch::mm(busy, a).div_(64);  // queued, not yet run
  std::vector<at::Tensor> tensors{busy.sum().reshape({1})};
  auto work = group.c10d_group()->allreduce(tensors);
  rankwise::diag::CollectiveRecord call;
  call.operation = "all_reduce";
  call.name = "after 100 queued matmuls";
  group.record_launched(call, work);
  const uint64_t sequence = group.flight_recorder().last_entered().sequence;
  EXPECT_EQ(recorded(sequence).state, rankwise::diag::CollectiveRecord::State::kEntered);
  torch::cuda::synchronize();
  const auto ran = std::chrono::system_clock::now();
  ASSERT_GT(ran - launched, std::chrono::milliseconds(20)) << "queue more GPU work before it";
  const auto deadline = ran + std::chrono::seconds(5);
  while (recorded(sequence).state == rankwise::diag::CollectiveRecord::State::kEntered &&
         std::chrono::system_clock::now() < deadline) {
    std::this_thread::yield();  // the poller's thread ends it within a millisecond
  }
  const auto entry = recorded(sequence);
  EXPECT_EQ(entry.state, rankwise::diag::CollectiveRecord::State::kCompleted);
  EXPECT_GE(entry.ended, launched + (ran - launched) / 2) << "ended at launch, not when it ran";
}

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
