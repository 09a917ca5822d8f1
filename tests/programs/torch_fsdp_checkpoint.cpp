// A worker for the FSDP interop tests (tests/unit/parallel/fsdp/fsdp_interop_test.cpp),
// run through rankwise-run:
//
//   torch_fsdp_checkpoint save DIR    trains tests/python/fsdp_interop.py's model two Adam
//                                     steps under FullyShardedDataParallel and saves the model
//                                     and the optimizer with save_sharded
//   torch_fsdp_checkpoint check DIR   wraps the model, loads DIR (written by either side) and
//                                     prints "fp KEY SUM SUMSQ" for every parameter and every
//                                     optimizer state tensor (over all ranks), on rank 0 ("save"
//                                     prints the same for the state it saved)
//   torch_fsdp_checkpoint replicated DIR OUT
//                                     as a DDP or one-process program: no FSDP, every entry of DIR
//                                     loaded as a whole tensor (or object) on every rank, printed
//                                     as "check" prints, and saved again to OUT
//
// The model, its initial values and the data are fsdp_interop.py's (the same formulas).
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/checkpoint/sharded_metadata.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/parallel/fully_sharded.h"

namespace {

torch::nn::Sequential make_model() {
  torch::nn::Sequential model(torch::nn::Linear(6, 10), torch::nn::Tanh(), torch::nn::Linear(10, 3));
  torch::NoGradGuard no_grad;
  int64_t k = 0;
  for (auto& p : model->parameters()) {  // fsdp_interop.py's initial()
    p.copy_((torch::arange(p.numel(), torch::kDouble) * 0.37 + static_cast<double>(k++)).sin().mul(0.3).view(p.sizes()));
  }
  return model;
}

std::pair<torch::Tensor, torch::Tensor> data() {
  auto x = (torch::arange(24, torch::kDouble) * 0.11).cos().view({4, 6}).to(torch::kFloat);
  auto y = (torch::arange(12, torch::kDouble) * 0.23).sin().view({4, 3}).to(torch::kFloat);
  return {x, y};
}

void fingerprint(const std::string& key, const torch::Tensor& local, bool sharded) {
  auto t = local.detach().to(torch::kDouble);
  auto sums = torch::stack({t.sum(), t.pow(2).sum()});
  if (sharded) rankwise::dist::all_reduce(sums);
  if (rankwise::dist::rank() == 0) {
    std::printf("fp %s %.10e %.10e\n", key.c_str(), sums[0].item<double>(), sums[1].item<double>());
  }
}

void fingerprints(rankwise::parallel::FullyShardedDataParallel<torch::nn::Sequential>& fsdp,
                  torch::optim::Adam& opt) {
  for (const auto& [name, full] : fsdp.full_state_dict()) fingerprint("model." + name, full, false);
  const auto saved = rankwise::checkpoint::optimizer_state_dict(opt).toGenericDict().at("state").toGenericDict();
  const auto shards = fsdp.parameters();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      torch::Tensor local = torch::zeros({0});
      const auto key = static_cast<int64_t>(i);
      if (saved.contains(key)) local = saved.at(key).toGenericDict().at(name).toTensor();
      fingerprint("optim.state." + std::to_string(i) + "." + name, local, true);
    }
  }
}

// Every entry of `dir` as a whole tensor or an object, as a program without
// FSDP (DDP's replicas, one process) loads it; printed, then saved to `out`.
int replicated(const std::string& dir, const std::string& out) {
  rankwise::checkpoint::ShardedState state;
  for (const auto& [key, meta] : rankwise::checkpoint::read_sharded_metadata(dir)) {
    if (meta.is_tensor) {
      state.emplace(key, torch::empty(meta.global_shape, torch::dtype(meta.dtype)));
    } else {
      state.emplace(key, rankwise::checkpoint::ObjectEntry{});
    }
  }
  rankwise::checkpoint::load_sharded(dir, state);
  for (const auto& [key, entry] : state) {
    const bool moment = key.ends_with(".exp_avg") || key.ends_with(".exp_avg_sq");
    if (key.starts_with("model.") || (key.starts_with("optim.state.") && moment)) {
      fingerprint(key, std::get<torch::Tensor>(entry), false);
    }
  }
  rankwise::checkpoint::save_sharded(out, state);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc != (mode == "replicated" ? 4 : 3)) {
    std::cerr << "usage: torch_fsdp_checkpoint save|check DIR | replicated DIR OUT\n";
    return 2;
  }
  const std::string dir = argv[2];
  rankwise::dist::init();
  if (mode == "replicated") return replicated(dir, argv[3]);
  auto model = make_model();
  rankwise::parallel::FullyShardedDataParallel fsdp(model);
  torch::optim::Adam opt(fsdp.parameters(), torch::optim::AdamOptions(0.05));
  if (mode == "save") {
    const auto [x, y] = data();
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      torch::mse_loss(fsdp.forward(x), y).backward();
      opt.step();
    }
    auto state = fsdp.sharded_state_dict();
    for (auto& [k, v] : rankwise::parallel::fsdp_optimizer_state_dict(*fsdp.engine(), opt)) state.emplace(k, v);
    rankwise::checkpoint::save_sharded(dir, state);
    std::cout << "rank " << rankwise::dist::rank() << ": saved" << std::endl;
    fingerprints(fsdp, opt);
    return 0;
  }
  auto state = fsdp.sharded_state_dict_to_load();
  const auto stored = rankwise::checkpoint::read_sharded_metadata(dir);
  for (auto& [k, v] : rankwise::parallel::fsdp_optimizer_state_dict_to_load(*fsdp.engine(), stored)) state.emplace(k, v);
  rankwise::checkpoint::load_sharded(dir, state);
  fsdp.load_sharded_state_dict(state);
  rankwise::parallel::load_fsdp_optimizer_state_dict(*fsdp.engine(), opt, state);
  fingerprints(fsdp, opt);
  return 0;
}
