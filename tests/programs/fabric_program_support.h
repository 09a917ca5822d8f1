#pragma once
// What the Fabric resume test programs (torch_fabric_accumulation,
// torch_fabric_accumulate, torch_fabric_strategy) share: their data and
// model, the kill marker and the final training state that
// tests/e2e/compare_checkpoints.py compares.
#include <torch/data/datasets/base.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "rankwise/rankwise.h"

namespace rankwise::test {

// Sample i of n: x = [i / n, sin(i)] (float32 [B, 2]), label i % 3 (int64 [B]).
class Samples : public torch::data::datasets::BatchDataset<Samples, torch::data::Example<>> {
 public:
  explicit Samples(int64_t n) : n_(n) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto i = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
    auto x = torch::stack({i.to(torch::kFloat32) / n_, torch::sin(i.to(torch::kFloat32))}, 1);
    return {x, i.remainder(3)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

// The resume programs' model: 2 -> 16 -> 3 with dropout between (which
// differs per rank under seed_per_rank).
struct DropoutNet : torch::nn::Module {
  DropoutNet() {
    fc1 = register_module("fc1", torch::nn::Linear(2, 16));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

inline bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Every rank joins in writing `path`: the training state at the run's end.
inline void save_final(const std::string& path, const Fabric& fabric, torch::nn::Module& model,
                       torch::optim::Optimizer& optimizer, torch::optim::LRScheduler& scheduler) {
  checkpoint::TrainingState state;
  state.model = &model;
  state.optimizer = &optimizer;
  state.lr_scheduler = &scheduler;
  state.step = fabric.step();
  state.epoch = fabric.epoch();
  checkpoint::save(path, checkpoint::capture(state));
  print0("done at step {}", fabric.step());
}

}  // namespace rankwise::test
