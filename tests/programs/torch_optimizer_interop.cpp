// The C++ side of the optimizer interop test with Python
// (tests/python/optimizer_interop.py, which documents the protocol):
//
//   torch_optimizer_interop start DIR     cpp_start_<opt>.pt (4 steps), cpp_full_<opt>.pt (8)
//   torch_optimizer_interop continue DIR  py_start_<opt>.pt + 4 steps -> cpp_cont_<opt>.pt
//
// Same model, batches, hyper-parameters and hand-written decay as the Python
// side; the continuing side builds its optimizer with other hyper-parameters.
#include <torch/torch.h>

#include <iostream>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/state_dict.h"

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

const std::vector<std::string> kOptimizers = {"sgd", "adam", "adamw", "rmsprop", "adagrad"};

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, Net& net, bool other) {
  using namespace torch::optim;
  auto params = net.parameters();
  if (kind == "sgd") {
    return std::make_unique<SGD>(params, SGDOptions(other ? 1.0 : 0.1)
                                             .momentum(other ? 0.0 : 0.9)
                                             .nesterov(!other)
                                             .weight_decay(other ? 0.0 : 1e-3));
  }
  if (kind == "adam") {
    return std::make_unique<Adam>(
        params, AdamOptions(other ? 1.0 : 0.01).betas(other ? std::make_tuple(0.5, 0.9) : std::make_tuple(0.8, 0.99)).amsgrad(!other));
  }
  if (kind == "adamw") {
    return std::make_unique<AdamW>(params, AdamWOptions(other ? 1.0 : 0.01).weight_decay(other ? 0.0 : 0.05));
  }
  if (kind == "rmsprop") {
    return std::make_unique<RMSprop>(params, RMSpropOptions(other ? 1.0 : 0.01)
                                                 .alpha(other ? 0.5 : 0.9)
                                                 .momentum(other ? 0.0 : 0.5)
                                                 .centered(!other));
  }
  return std::make_unique<Adagrad>(params, AdagradOptions(other ? 1.0 : 0.05)
                                               .lr_decay(other ? 0.0 : 0.01)
                                               .initial_accumulator_value(other ? 0.0 : 0.1));
}

void train(const std::string& kind, const std::string& start, int steps, const std::string& out) {
  torch::manual_seed(3);
  Net model;
  int64_t step = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (start.empty()) {
    optimizer = make_optimizer(kind, model, false);
  } else {
    const auto ckpt = rankwise::checkpoint::load(start);
    rankwise::checkpoint::load_state_dict(model, rankwise::checkpoint::to_state_dict(ckpt.at("model")));
    optimizer = make_optimizer(kind, model, true);
    rankwise::checkpoint::load_optimizer_state_dict(*optimizer, ckpt.at("optimizer"));
    step = ckpt.at("step").toInt();
  }
  for (int i = 0; i < steps; ++i) {
    if (step == 2) {  // a hand-written decay; saved in the optimizer's lr
      for (auto& group : optimizer->param_groups()) group.options().set_lr(group.options().get_lr() * 0.5);
    }
    const auto x = torch::sin(torch::arange(32, torch::kFloat32).reshape({8, 4}) * (0.1 * (step + 1)));
    const auto y = torch::cos(torch::arange(8, torch::kFloat32).reshape({8, 1}) * (0.3 * (step + 1)));
    optimizer->zero_grad();
    torch::mse_loss(model.forward(x), y).backward();
    optimizer->step();
    step += 1;
  }
  rankwise::checkpoint::Checkpoint result;
  result.insert("model", rankwise::checkpoint::state_dict(model));
  result.insert("optimizer", rankwise::checkpoint::optimizer_state_dict(*optimizer));
  result.insert("step", step);
  rankwise::checkpoint::save(out, result);
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  const std::string mode = argc == 3 ? argv[1] : "";
  const std::string dir = argc == 3 ? argv[2] : "";
  try {
    if (mode == "start") {
      for (const auto& kind : kOptimizers) {
        train(kind, "", 4, dir + "/cpp_start_" + kind + ".pt");
        train(kind, "", 8, dir + "/cpp_full_" + kind + ".pt");
      }
      std::cout << "started\n";
      return 0;
    }
    if (mode == "continue") {
      for (const auto& kind : kOptimizers) {
        train(kind, dir + "/py_start_" + kind + ".pt", 4, dir + "/cpp_cont_" + kind + ".pt");
      }
      std::cout << "continued\n";
      return 0;
    }
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: torch_optimizer_interop start|continue DIR\n";
  return 2;
}
