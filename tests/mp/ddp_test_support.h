#pragma once
// Helpers shared by the DDP multi-process tests: deterministic per-rank
// batches, a training loop and parameter comparisons.
#include <torch/torch.h>

#include <utility>
#include <vector>

namespace ddp_test {

inline torch::Tensor flat_parameters(torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

// Batch `step` of rank r: 4 samples (5 features, 3 targets) from its own seed.
inline std::pair<torch::Tensor, torch::Tensor> batch_of(int r, int step = 0) {
  torch::manual_seed(100 + 1000 * r + step);
  return {torch::randn({4, 5}), torch::randn({4, 3})};
}

// `steps` training steps of rank r on its own batches (see batch_of).
template <typename Ddp, typename Optimizer>
void train(Ddp& ddp, Optimizer& opt, int r, int steps) {
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch_of(r, step);
    opt.zero_grad();
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
  }
}

inline float max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<float>();
}

}  // namespace ddp_test
