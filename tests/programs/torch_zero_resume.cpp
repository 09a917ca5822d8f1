// torch_zero_resume save|resume DIR: ZeroRedundancyOptimizer's consolidated
// state across a change of world size (tests/e2e/zero_resume_world_size.sh).
//   save    DDP + ZeroRedundancyOptimizer(Adam) for 10 steps; rank 0 writes
//           DIR/state.pt: the model and zero.state_dict().
//   resume  at any world size: every rank loads DIR/state.pt into a
//           ZeroRedundancyOptimizer and, as the reference, into a plain Adam
//           over a second copy of the model. Checks (exit 1 naming what
//           differs): the loaded optimizer's state_dict() equals the saved
//           one tensor for tensor; after 10 more DDP steps each, the models
//           agree within 1e-6, the ZeRO optimizer's state equals the plain
//           one's within 1e-6, and every rank's replica is bitwise equal.
#include <torch/torch.h>

#include <string>

#include "rankwise/rankwise.h"
#include "rankwise/zero_redundancy_optimizer.h"

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 12));
    fc2 = register_module("fc2", torch::nn::Linear(12, 5));
    fc3 = register_module("fc3", torch::nn::Linear(5, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

rankwise::ZeroRedundancyOptimizer::Factory adam() {
  return [](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups),
                                                torch::optim::AdamOptions(0.01));
  };
}

// `steps` DDP steps on this rank's batches (seeded by rank and step).
template <typename Ddp, typename Opt>
void train(Ddp& ddp, Opt& opt, int first_step, int steps) {
  for (int step = first_step; step < first_step + steps; ++step) {
    torch::manual_seed(1000 * rankwise::rank() + step);
    const auto x = torch::randn({4, 6}), y = torch::randn({4, 2});
    opt.zero_grad();
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
  }
}

torch::Tensor flat(torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

// Largest difference between two optimizer state_dicts' tensors; throws
// when their keys differ.
double max_state_diff(const c10::IValue& a, const c10::IValue& b) {
  const auto sa = a.toGenericDict().at("state").toGenericDict();
  const auto sb = b.toGenericDict().at("state").toGenericDict();
  if (sa.size() != sb.size()) {
    throw rankwise::Error("state_dicts hold " + std::to_string(sa.size()) + " and " +
                          std::to_string(sb.size()) + " parameters' state");
  }
  double diff = 0;
  for (const auto& e : sa) {
    const auto other = sb.at(e.key()).toGenericDict();
    for (const auto& field : e.value().toGenericDict()) {
      const auto& t = field.value().toTensor();
      const auto& u = other.at(field.key()).toTensor();
      diff = std::max(diff, (t.to(torch::kFloat64) - u.to(torch::kFloat64)).abs().max().item<double>());
    }
  }
  return diff;
}

int run(int argc, char** argv) {
  if (argc != 3) throw rankwise::ConfigError("usage: torch_zero_resume save|resume DIR");
  const std::string mode = argv[1], path = std::string(argv[2]) + "/state.pt";
  rankwise::init();
  torch::manual_seed(0);
  auto model = std::make_shared<Net>();
  rankwise::DistributedDataParallel ddp(model);
  rankwise::ZeroRedundancyOptimizer zero(ddp.parameters(), adam());
  if (mode == "save") {
    train(ddp, zero, 0, 10);
    rankwise::Checkpoint state;
    state.insert("model", rankwise::state_dict(*model));
    state.insert("optimizer", zero.state_dict());
    rankwise::save(path, state);
    rankwise::print0("saved at world size {}", rankwise::world_size());
    return 0;
  }
  if (mode != "resume") throw rankwise::ConfigError("mode must be save or resume, not " + mode);
  const rankwise::Checkpoint state = rankwise::load(path);
  rankwise::load_state_dict(*model, rankwise::to_state_dict(state.at("model")));
  zero.load_state_dict(state.at("optimizer"));
  const double reloaded = max_state_diff(zero.state_dict(), state.at("optimizer"));
  if (reloaded != 0) throw rankwise::Error("reloaded state differs by " + std::to_string(reloaded));

  auto plain_model = std::make_shared<Net>();
  rankwise::load_state_dict(*plain_model, rankwise::to_state_dict(state.at("model")));
  rankwise::DistributedDataParallel plain(plain_model);
  torch::optim::Adam plain_opt(plain.parameters(), torch::optim::AdamOptions(0.01));
  rankwise::load_optimizer_state_dict(plain_opt, state.at("optimizer"));

  train(ddp, zero, 10, 10);
  train(plain, plain_opt, 10, 10);
  const double params = (flat(*model) - flat(*plain_model)).abs().max().item<double>();
  const double opt_state = max_state_diff(zero.state_dict(), rankwise::optimizer_state_dict(plain_opt));
  const auto mine = flat(*model);
  for (const auto& other : rankwise::all_gather(mine)) {
    if (!other.equal(mine)) throw rankwise::Error("the replicas differ after resuming");
  }
  if (params > 1e-6 || opt_state > 1e-6) {
    throw rankwise::Error("after 10 steps at the new world size, parameters differ from plain "
                          "Adam's by " + std::to_string(params) + ", optimizer state by " +
                          std::to_string(opt_state));
  }
  rankwise::print0("resumed at world size {}: state identical; after 10 steps parameters within "
                   "{:.1e}, optimizer state within {:.1e} of plain Adam",
                   rankwise::world_size(), params, opt_state);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, run); }
