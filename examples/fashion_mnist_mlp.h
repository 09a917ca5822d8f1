#pragma once
// The main job's model (examples/fashion_mnist.cpp), also timed by
// bench/bench_gpu_step.cpp: an MLP 784-256-128-10 with ReLUs, the modules
// named fc1, fc2, fc3 as in the Python equivalent.
#include <torch/torch.h>

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);
