#pragma once
// What the Fabric resume test programs (torch_fabric_accumulation,
// torch_fabric_accumulate) share: their data, the kill marker and the final
// training state that tests/e2e/compare_checkpoints.py compares.
#include <torch/data/datasets/base.h>
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
