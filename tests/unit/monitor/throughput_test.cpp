// rankwise::monitor's MFU pieces: FLOPs counted for a model of Linear layers
// (and refused, naming the layer, for one it cannot count), the GPU peak
// table by CUDA's device names, and the CPU's measured matmul rate.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <iostream>
#include <string>

#include "rankwise/error.h"
#include "rankwise/monitor/throughput.h"

namespace rankwise::monitor {
namespace {

TEST(Throughput, TrainingFlopsAreThreeForwardsOfTheLinearLayers) {
  torch::nn::Sequential mlp(torch::nn::Linear(10, 20), torch::nn::ReLU(), torch::nn::LayerNorm(torch::nn::LayerNormOptions({20})),
                            torch::nn::Linear(torch::nn::LinearOptions(20, 5).bias(false)));
  // forward: 2 * (10*20 + 20*5) multiply-adds; backward twice that.
  EXPECT_DOUBLE_EQ(training_flops_per_sample(*mlp), 3.0 * 2.0 * (200 + 100));
}

TEST(Throughput, ALayerItCannotCountIsNamed) {
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)), torch::nn::Linear(4, 2));
  try {
    training_flops_per_sample(*net);
    FAIL() << "a Conv2d was counted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot count the FLOPs of model.0 (torch::nn::Conv2dImpl)"), std::string::npos) << what;
    EXPECT_NE(what.find("--flops-per-sample"), std::string::npos) << what;
  }
}

TEST(Throughput, GpuPeaksComeFromTheTableByName) {
  EXPECT_DOUBLE_EQ(*gpu_peak_flops("NVIDIA H100 80GB HBM3", torch::kBFloat16), 989.4e12);
  EXPECT_DOUBLE_EQ(*gpu_peak_flops("NVIDIA H100 PCIe", torch::kHalf), 756.5e12);
  EXPECT_DOUBLE_EQ(*gpu_peak_flops("NVIDIA H200", torch::kFloat32), 66.9e12);
  EXPECT_DOUBLE_EQ(*gpu_peak_flops("NVIDIA A100-SXM4-80GB", torch::kBFloat16), 312e12);
  EXPECT_FALSE(gpu_peak_flops("NVIDIA GeForce GTX 1080", torch::kFloat32).has_value());
  EXPECT_FALSE(gpu_peak_flops("NVIDIA H100 80GB HBM3", torch::kFloat64).has_value());
}

TEST(Throughput, TheCpuPeakIsMeasured) {
  const double flops = measure_matmul_flops(torch::kCPU, torch::kFloat32, std::chrono::milliseconds(50));
  EXPECT_GT(flops, 1e8);    // any CPU of this century
  EXPECT_LT(flops, 1e14);   // no CPU core reaches 100 TFLOP/s in float32
  EXPECT_EQ(gpu_name(999), "");  // no such device, with or without a CUDA driver
}

// On the GPU check's machine: CUDA's name of the GPU, which the peak table
// knows (an H100/H200).
TEST(Throughput, AVisibleGpuHasANameAndAPeak) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible";
  torch::ones({1}, torch::kCUDA);  // loads the CUDA driver
  const std::string name = gpu_name(0);
  EXPECT_NE(name, "");
  std::cout << "GPU 0: " << name << ", bfloat16 peak "
            << gpu_peak_flops(name, torch::kBFloat16).value_or(0) / 1e12 << " TFLOP/s\n";
}

TEST(Throughput, MeasuringLeavesTheProgramsRandomNumbersAlone) {
  torch::manual_seed(3);
  const auto expected = torch::rand({4});
  torch::manual_seed(3);
  measure_matmul_flops(torch::kCPU, torch::kFloat32, std::chrono::milliseconds(1));
  EXPECT_TRUE(torch::rand({4}).equal(expected));
}

}  // namespace
}  // namespace rankwise::monitor
