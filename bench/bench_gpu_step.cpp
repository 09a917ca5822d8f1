// One training step of the main job's MLP (784-256-128-10, SGD with momentum,
// cross-entropy) on one device, in C++: the counterpart of
// bench/gpu_step_reference.py, which times the same step in Python.
//
//   bench_gpu_step [DEVICE=cuda:0] [BATCH=64] [STEPS=500] [REPEATS=5]
//
// Prints "cpp_step_us <median over REPEATS of the mean step time, µs>". Each
// repeat times STEPS steps after 50 warm-up steps, the device synchronized
// before and after (torch::cuda::synchronize on a GPU). Random inputs: the
// time of a step does not depend on the data.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../examples/fashion_mnist_mlp.h"

int main(int argc, char** argv) {
  const torch::Device device(argc > 1 ? argv[1] : "cuda:0");
  const int64_t batch = argc > 2 ? std::stoll(argv[2]) : 64;
  const int steps = argc > 3 ? std::stoi(argv[3]) : 500;
  const int repeats = argc > 4 ? std::stoi(argv[4]) : 5;
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  torch::manual_seed(0);
  Mlp model;
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  auto x = torch::rand({batch, 784}, torch::TensorOptions().device(device));
  auto y = torch::randint(0, 10, {batch}, torch::TensorOptions().device(device).dtype(torch::kLong));
  auto step = [&] {
    optimizer.zero_grad();
    torch::cross_entropy_loss(model->forward(x), y).backward();
    optimizer.step();
  };
  for (int i = 0; i < 50; ++i) step();
  std::vector<double> means;
  for (int r = 0; r < repeats; ++r) {
    sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    sync();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    means.push_back(took.count() / steps);
  }
  std::sort(means.begin(), means.end());
  std::printf("cpp_step_us %.2f\n", means[means.size() / 2]);
  return 0;
}
