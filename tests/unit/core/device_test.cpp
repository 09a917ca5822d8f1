// CUDA_VISIBLE_DEVICES parsing and the LOCAL_RANK -> device mapping (no GPU
// needed), plus one GPU-only check.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <stdlib.h>

#include "rankwise/device.h"
#include "rankwise/error.h"

using rankwise::assign_device;
using rankwise::ConfigError;
using rankwise::DeviceKind;
using rankwise::parse_cuda_visible_devices;
using List = std::vector<std::string>;

namespace {

// The ConfigError text for `value` (fails the test when nothing is thrown).
std::string parse_error(const std::string& value) {
  try {
    parse_cuda_visible_devices(value);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for CUDA_VISIBLE_DEVICES='" << value << "'";
  return "";
}

}  // namespace

TEST(CudaVisibleDevices, UnsetMeansAllVisible) {
  EXPECT_FALSE(parse_cuda_visible_devices(std::nullopt).has_value());
}

TEST(CudaVisibleDevices, EmptyOrMinusOneHidesEveryGpu) {
  for (const char* v : {"", "-1", " ", " -1 "}) {
    auto r = parse_cuda_visible_devices(std::string(v));
    ASSERT_TRUE(r.has_value()) << "'" << v << "'";
    EXPECT_TRUE(r->empty()) << "'" << v << "'";
  }
}

TEST(CudaVisibleDevices, IndexForm) {
  EXPECT_EQ(*parse_cuda_visible_devices(std::string("2,3")), (List{"2", "3"}));
  EXPECT_EQ(*parse_cuda_visible_devices(std::string("0")), (List{"0"}));
  EXPECT_EQ(*parse_cuda_visible_devices(std::string("3, 1 ,0")), (List{"3", "1", "0"}));
  EXPECT_EQ(*parse_cuda_visible_devices(std::string("10,7")), (List{"10", "7"}));
}

TEST(CudaVisibleDevices, UuidAndMigForms) {
  const std::string uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  EXPECT_EQ(*parse_cuda_visible_devices(uuid), (List{uuid}));
  EXPECT_EQ(*parse_cuda_visible_devices(std::string("GPU-8932f937,GPU-ab12")),
            (List{"GPU-8932f937", "GPU-ab12"}));
  EXPECT_EQ(*parse_cuda_visible_devices(std::string("MIG-GPU-8932f937-d72c/1/0,MIG-4f2a-77")),
            (List{"MIG-GPU-8932f937-d72c/1/0", "MIG-4f2a-77"}));
  EXPECT_EQ(*parse_cuda_visible_devices(std::string("1,GPU-8932f937")),
            (List{"1", "GPU-8932f937"}));
}

TEST(CudaVisibleDevices, InvalidEntriesNameVariableAndEntry) {
  std::string e = parse_error("a,1");
  EXPECT_NE(e.find("CUDA_VISIBLE_DEVICES='a,1'"), std::string::npos) << e;
  EXPECT_NE(e.find("entry 1 ('a')"), std::string::npos) << e;

  e = parse_error("1,,2");
  EXPECT_NE(e.find("entry 2 ('')"), std::string::npos) << e;
  EXPECT_NE(e.find("empty entry"), std::string::npos) << e;

  e = parse_error("0,-1,1");  // CUDA would use GPU 0 only; we refuse
  EXPECT_NE(e.find("entry 2 ('-1')"), std::string::npos) << e;

  e = parse_error("1,");
  EXPECT_NE(e.find("entry 2 ('')"), std::string::npos) << e;

  e = parse_error("GPU-");
  EXPECT_NE(e.find("GPU UUID"), std::string::npos) << e;
  e = parse_error("GPU-xyz");
  EXPECT_NE(e.find("'GPU-xyz'"), std::string::npos) << e;
  e = parse_error("MIG-");
  EXPECT_NE(e.find("MIG"), std::string::npos) << e;

  for (const char* v : {"+1", "1.0", "cuda:0", "0x1", ","}) parse_error(v);
}

TEST(CudaVisibleDevices, DuplicatesAreErrors) {
  std::string e = parse_error("1,1");
  EXPECT_NE(e.find("repeats"), std::string::npos) << e;
  EXPECT_NE(e.find("CUDA_VISIBLE_DEVICES='1,1'"), std::string::npos) << e;
  parse_error("2,02");  // the same index
  parse_error("GPU-ab12,0,GPU-ab12");
}

TEST(DeviceMapping, VisibleSubsetRenumbers) {
  // CUDA_VISIBLE_DEVICES=2,3: CUDA reports 2 devices; workers use cuda:0 and
  // cuda:1, which are physical GPUs 2 and 3.
  const auto visible = parse_cuda_visible_devices(std::string("2,3"));
  auto a0 = assign_device(0, 2, 2, visible);
  auto a1 = assign_device(1, 2, 2, visible);
  EXPECT_EQ(a0.device_string(), "cuda:0");
  EXPECT_EQ(a0.physical, "2");
  EXPECT_EQ(a1.device_string(), "cuda:1");
  EXPECT_EQ(a1.physical, "3");
  EXPECT_EQ(a1.torch_device(), torch::Device(torch::kCUDA, 1));
  EXPECT_EQ(a1.local_rank, 1);
}

TEST(DeviceMapping, UnsetMeansPhysicalEqualsVisible) {
  auto a = assign_device(3, 4, 8, std::nullopt);
  EXPECT_EQ(a.device_string(), "cuda:3");
  EXPECT_EQ(a.physical, "3");
}

TEST(DeviceMapping, UuidIsThePhysicalName) {
  const auto visible = parse_cuda_visible_devices(std::string("GPU-aa,GPU-bb"));
  EXPECT_EQ(assign_device(1, 2, 2, visible).physical, "GPU-bb");
}

TEST(DeviceMapping, NoGpuMeansCpu) {
  for (auto kind : {DeviceKind::kAuto, DeviceKind::kCpu}) {
    auto a = assign_device(1, 2, 0, std::nullopt, kind);
    EXPECT_FALSE(a.is_cuda());
    EXPECT_EQ(a.device_string(), "cpu");
    EXPECT_EQ(a.physical, "-");
    EXPECT_EQ(a.torch_device(), torch::Device(torch::kCPU));
  }
  // CUDA_VISIBLE_DEVICES="" on a GPU machine: CUDA reports 0 devices.
  EXPECT_EQ(assign_device(0, 1, 0, List{}).device_string(), "cpu");
}

TEST(DeviceMapping, CpuKindIgnoresGpus) {
  EXPECT_EQ(assign_device(0, 2, 2, std::nullopt, DeviceKind::kCpu).device_string(), "cpu");
}

TEST(DeviceMapping, AutoWithMoreProcessesThanGpusUsesCpuOnEveryRank) {
  // 4 processes, 2 GPUs: no rank gets a GPU (never a mixed GPU/CPU node).
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(assign_device(r, 4, 2, parse_cuda_visible_devices(std::string("2,3"))).device_string(),
              "cpu");
  }
}

TEST(DeviceMapping, CudaKindWithTooFewGpusIsAnError) {
  try {
    assign_device(0, 4, 2, parse_cuda_visible_devices(std::string("2,3")), DeviceKind::kCuda);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("LOCAL_WORLD_SIZE=4"), std::string::npos) << m;
    EXPECT_NE(m.find("2 GPU(s) are visible"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES=2,3"), std::string::npos) << m;
  }
  EXPECT_THROW(assign_device(0, 1, 0, std::nullopt, DeviceKind::kCuda), ConfigError);
  EXPECT_EQ(assign_device(1, 2, 2, std::nullopt, DeviceKind::kCuda).device_string(), "cuda:1");
}

TEST(DeviceMapping, LocalRankOutOfRange) {
  EXPECT_THROW(assign_device(2, 2, 4, std::nullopt), ConfigError);
  EXPECT_THROW(assign_device(-1, 2, 4, std::nullopt), ConfigError);
}

TEST(DeviceMapping, FromEnvironment) {
  // Reads LOCAL_RANK/LOCAL_WORLD_SIZE and CUDA_VISIBLE_DEVICES via get_env.
  ::setenv("CUDA_VISIBLE_DEVICES", "a,1", 1);
  EXPECT_THROW(rankwise::device_assignment(), ConfigError);
  EXPECT_EQ(rankwise::device(DeviceKind::kCpu), torch::Device(torch::kCPU));  // not parsed
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(rankwise::device(), torch::Device(torch::kCPU));
    EXPECT_THROW(rankwise::device(DeviceKind::kCuda), ConfigError);
  }
}

TEST(DeviceMapping, VirtualLocalRankWithoutAGpuNamesTheRealLocalRank) {
  // --virtual-local-rank: LOCAL_RANK stays the worker's, the GPU it sees is
  // its only one; without one, the error says so, not "LOCAL_WORLD_SIZE=1".
  auto env = rankwise::LaunchEnv::from_map({{"RANK", "3"},
                                            {"WORLD_SIZE", "4"},
                                            {"LOCAL_RANK", "3"},
                                            {"LOCAL_WORLD_SIZE", "4"},
                                            {"RANKWISE_VIRTUAL_LOCAL_RANK", "1"}});
  ASSERT_TRUE(env.virtual_local_rank);
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // this worker's GPU is missing
  try {
    rankwise::device_assignment(env, DeviceKind::kCuda);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("local rank 3: the program asked for a GPU (--device cuda, "
                        "DeviceKind::kCuda) under rankwise-run --virtual-local-rank"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("sees none (CUDA_VISIBLE_DEVICES="), std::string::npos) << what;
    EXPECT_EQ(what.find("LOCAL_WORLD_SIZE=1"), std::string::npos) << what;
  }
  EXPECT_FALSE(rankwise::device_assignment(env, DeviceKind::kAuto).is_cuda());  // auto: the CPU
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(DeviceGpu, LocalRankZeroUsesFirstVisibleGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (CPU-only libtorch or no GPU)";
  auto a = rankwise::device_assignment();
  EXPECT_EQ(a.device_string(), "cuda:0");
  EXPECT_EQ(rankwise::device(), torch::Device(torch::kCUDA, 0));
  auto t = torch::ones({2}, torch::TensorOptions().device(rankwise::device()));
  EXPECT_EQ(t.sum().item<float>(), 2.0f);
}
