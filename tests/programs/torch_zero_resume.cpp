// torch_zero_resume save|resume|resume-sharded DIR: ZeroRedundancyOptimizer's
// state across a change of world size (tests/e2e/zero_resume_world_size.sh).
//   save    DDP + ZeroRedundancyOptimizer(Adam, two parameter groups) for 10
//           steps; rank 0 writes DIR/state.pt: the model and
//           zero.state_dict() (consolidated); then every rank writes its
//           own partition's state with the model into the sharded
//           checkpoint DIR/sharded (save_sharded of sharded_state_dict()).
//   resume  at any world size: every rank loads DIR/state.pt into a
//           ZeroRedundancyOptimizer and, as the reference, into a plain Adam
//           over a second copy of the model. Checks (exit 1 naming what
//           differs): the loaded optimizer's state_dict() equals the saved
//           one tensor for tensor; after 10 more DDP steps each, the models
//           agree within 1e-6, the ZeRO optimizer's state equals the plain
//           one's within 1e-6, and every rank's replica is bitwise equal.
//   resume-sharded  the same, the ZeRO optimizer and the model loaded from
//           DIR/sharded (read_sharded_metadata, sharded_state_dict_to_load,
//           load_sharded): its gathered state_dict() must equal DIR/state.pt's
//           exactly, group options included, and every state tensor must
//           have been stored as one chunk (by its owner alone).
#include <torch/torch.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/checkpoint/sharded_metadata.h"
#include "rankwise/rankwise.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"

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

rankwise::parallel::ZeroRedundancyOptimizer::Factory adam() {
  return [](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups),
                                                torch::optim::AdamOptions(0.01));
  };
}

// Two groups: fc1 with the defaults, the rest with its own learning rate and betas.
std::vector<torch::optim::OptimizerParamGroup> groups_of(const std::vector<torch::Tensor>& params, Net& net) {
  std::vector<torch::Tensor> first, rest;
  const auto fc1 = net.fc1->parameters();
  for (const auto& p : params) {
    const bool in_fc1 = std::any_of(fc1.begin(), fc1.end(), [&](const torch::Tensor& q) { return q.is_same(p); });
    (in_fc1 ? first : rest).push_back(p);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(first);
  groups.emplace_back(rest, std::make_unique<torch::optim::AdamOptions>(
                                torch::optim::AdamOptions(0.02).betas({0.8, 0.99})));
  return groups;
}

// Options of every group equal: the same keys and values.
void check_same_groups(const c10::IValue& a, const c10::IValue& b) {
  const auto ga = a.toGenericDict().at("param_groups").toListRef();
  const auto gb = b.toGenericDict().at("param_groups").toListRef();
  if (ga.size() != gb.size()) throw rankwise::Error("the number of parameter groups differs");
  for (std::size_t g = 0; g < ga.size(); ++g) {
    std::ostringstream x, y;
    x << ga[g];
    y << gb[g];
    if (x.str() != y.str()) throw rankwise::Error("group " + std::to_string(g) + " differs: " + x.str() + " vs " + y.str());
  }
}

// `steps` DDP steps on this rank's batches (seeded by rank and step).
template <typename Ddp, typename Opt>
void train(Ddp& ddp, Opt& opt, int first_step, int steps) {
  for (int step = first_step; step < first_step + steps; ++step) {
    torch::manual_seed(1000 * rankwise::dist::rank() + step);
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
  if (argc != 3) throw rankwise::ConfigError("usage: torch_zero_resume save|resume|resume-sharded DIR");
  const std::string mode = argv[1], path = std::string(argv[2]) + "/state.pt";
  const std::string sharded = std::string(argv[2]) + "/sharded";
  rankwise::dist::init();
  torch::manual_seed(0);
  auto model = std::make_shared<Net>();
  rankwise::parallel::DistributedDataParallel ddp(model);
  rankwise::parallel::ZeroRedundancyOptimizer zero(groups_of(ddp.parameters(), *model), adam());
  if (mode == "save") {
    train(ddp, zero, 0, 10);
    rankwise::checkpoint::Checkpoint state;
    state.insert("model", rankwise::checkpoint::state_dict(*model));
    state.insert("optimizer", zero.state_dict());
    rankwise::checkpoint::save(path, state);
    rankwise::checkpoint::ShardedState shards = zero.sharded_state_dict();
    for (const auto& p : model->named_parameters()) shards.emplace("model." + p.key(), p.value().detach());
    rankwise::checkpoint::save_sharded(sharded, shards);
    rankwise::print0("saved at world size {}", rankwise::dist::world_size());
    return 0;
  }
  if (mode != "resume" && mode != "resume-sharded") {
    throw rankwise::ConfigError("mode must be save, resume or resume-sharded, not " + mode);
  }
  const rankwise::checkpoint::Checkpoint state = rankwise::checkpoint::load(path);
  if (mode == "resume") {
    rankwise::checkpoint::load_state_dict(*model, rankwise::checkpoint::to_state_dict(state.at("model")));
    zero.load_state_dict(state.at("optimizer"));
  } else {
    const auto stored = rankwise::checkpoint::read_sharded_metadata(sharded);
    rankwise::checkpoint::ShardedState targets = zero.sharded_state_dict_to_load(stored);
    for (const auto& p : model->named_parameters()) targets.emplace("model." + p.key(), torch::zeros_like(p.value()));
    for (const auto& [key, entry] : stored) {
      if (entry.is_tensor && key.rfind("optim.state.", 0) == 0 && entry.stored_chunks != 1) {
        throw rankwise::Error(key + " was stored as " + std::to_string(entry.stored_chunks) + " chunks, not 1");
      }
    }
    try {  // targets not filled yet: a clear error, not "another model"
      zero.load_sharded_state_dict(targets);
      throw rankwise::Error("load_sharded_state_dict accepted targets that load_sharded never filled");
    } catch (const rankwise::CheckpointError& e) {
      if (std::string(e.what()).find("the entries were not filled") == std::string::npos) throw;
    }
    rankwise::checkpoint::load_sharded(sharded, targets);
    zero.load_sharded_state_dict(targets);
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      p.value().copy_(std::get<torch::Tensor>(targets.at("model." + p.key())));
    }
  }
  const c10::IValue reloaded_state = zero.state_dict();
  check_same_groups(reloaded_state, state.at("optimizer"));
  const double reloaded = max_state_diff(reloaded_state, state.at("optimizer"));
  if (reloaded != 0) throw rankwise::Error("reloaded state differs by " + std::to_string(reloaded));

  auto plain_model = std::make_shared<Net>();
  rankwise::checkpoint::load_state_dict(*plain_model, rankwise::checkpoint::to_state_dict(state.at("model")));
  rankwise::parallel::DistributedDataParallel plain(plain_model);
  torch::optim::Adam plain_opt(groups_of(plain.parameters(), *plain_model), torch::optim::AdamOptions(0.01));
  rankwise::checkpoint::load_optimizer_state_dict(plain_opt, state.at("optimizer"));

  train(ddp, zero, 10, 10);
  train(plain, plain_opt, 10, 10);
  const double params = (flat(*model) - flat(*plain_model)).abs().max().item<double>();
  const double opt_state = max_state_diff(zero.state_dict(), rankwise::checkpoint::optimizer_state_dict(plain_opt));
  const auto mine = flat(*model);
  for (const auto& other : rankwise::dist::all_gather(mine)) {
    if (!other.equal(mine)) throw rankwise::Error("the replicas differ after resuming");
  }
  if (params > 1e-6 || opt_state > 1e-6) {
    throw rankwise::Error("after 10 steps at the new world size, parameters differ from plain "
                          "Adam's by " + std::to_string(params) + ", optimizer state by " +
                          std::to_string(opt_state));
  }
  rankwise::print0("{} at world size {}: state identical; after 10 steps parameters within "
                   "{:.1e}, optimizer state within {:.1e} of plain Adam",
                   mode == "resume" ? "resumed" : "resumed from the sharded checkpoint", rankwise::dist::world_size(),
                   params, opt_state);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, run); }
