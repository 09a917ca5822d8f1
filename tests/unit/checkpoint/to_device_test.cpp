// Loading checkpoints onto a device (map_location): the CPU, and cuda:0 where
// CUDA is available.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>

#include "rankwise/checkpoint/checkpoint.h"

namespace fs = std::filesystem;

namespace {

fs::path fresh_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("rankwise_ckpt_dev_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir / "c.pt";
}

// Tensors at the top level, in a state dict, in a list and in a tuple.
rankwise::checkpoint::Checkpoint nested(const torch::Device& device) {
  auto opts = torch::TensorOptions().device(device);
  rankwise::checkpoint::Checkpoint c;
  c.insert("w", torch::arange(6, opts.dtype(torch::kFloat32)).reshape({2, 3}));
  c10::impl::GenericDict model(c10::StringType::get(), c10::AnyType::get());
  model.insert("fc.weight", torch::full({3}, 0.5, opts));
  model.insert("fc.bias", torch::tensor({-1.0, 2.0}, opts.dtype(torch::kFloat64)));
  c.insert("model", model);
  c.insert("bufs", c10::List<at::Tensor>({torch::ones({2}, opts.dtype(torch::kInt64))}));
  c.insert("pair", c10::ivalue::Tuple::create({torch::zeros({1}, opts), c10::IValue(int64_t{7})}));
  c.insert("step", int64_t{3});
  return c;
}

std::vector<torch::Tensor> tensors_of(const rankwise::checkpoint::Checkpoint& c) {
  const auto model = c.at("model").toGenericDict();
  return {c.at("w").toTensor(), model.at("fc.weight").toTensor(), model.at("fc.bias").toTensor(),
          c.at("bufs").toListRef()[0].toTensor(), c.at("pair").toTupleRef().elements()[0].toTensor()};
}

void expect_same_values_on(const rankwise::checkpoint::Checkpoint& got, const rankwise::checkpoint::Checkpoint& want,
                           const torch::Device& device) {
  const auto g = tensors_of(got), w = tensors_of(want);
  ASSERT_EQ(g.size(), w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].device(), device) << "tensor " << i;
    EXPECT_EQ(g[i].dtype(), w[i].dtype()) << "tensor " << i;
    EXPECT_TRUE(g[i].cpu().equal(w[i].cpu())) << "tensor " << i;
  }
  EXPECT_EQ(got.at("step").toInt(), 3);
  EXPECT_EQ(got.at("pair").toTupleRef().elements()[1].toInt(), 7);
}

}  // namespace

TEST(CheckpointDevice, LoadOntoTheCpu) {
  const auto path = fresh_path("cpu");
  const auto saved = nested(torch::kCPU);
  rankwise::checkpoint::save(path.string(), saved);
  expect_same_values_on(rankwise::checkpoint::load(path.string(), torch::kCPU), saved, torch::kCPU);
}

// The meta device stands in for a GPU on machines without one: every tensor,
// however deeply nested, is moved; the original keeps its own.
TEST(CheckpointDevice, ToDeviceMovesNestedTensorsAndLeavesTheOriginalAlone) {
  const auto cpu = nested(torch::kCPU);
  const auto moved = rankwise::checkpoint::to_device(cpu, torch::kMeta);
  for (const auto& t : tensors_of(moved)) EXPECT_TRUE(t.is_meta()) << t.device();
  for (const auto& t : tensors_of(cpu)) EXPECT_TRUE(t.device().is_cpu()) << t.device();
  EXPECT_EQ(moved.at("step").toInt(), 3);
  EXPECT_EQ(moved.at("pair").toTupleRef().elements()[1].toInt(), 7);
  EXPECT_EQ(moved.keys(), cpu.keys());
}

TEST(CheckpointDevice, SavedFromCuda0LoadsOntoCpuAndCuda0) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  const auto path = fresh_path("cuda");
  const auto saved = nested(gpu);
  rankwise::checkpoint::save(path.string(), saved);
  expect_same_values_on(rankwise::checkpoint::load(path.string()), saved, torch::kCPU);
  expect_same_values_on(rankwise::checkpoint::load(path.string(), torch::kCPU), saved, torch::kCPU);
  expect_same_values_on(rankwise::checkpoint::load(path.string(), gpu), saved, gpu);
}
