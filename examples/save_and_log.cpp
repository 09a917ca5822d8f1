// Port of seed 001's ddp_save_log.py: one DDP step, an honest loss (sums and
// counts reduced, then divided once), rank 0 writes the checkpoint atomically
// while the others wait, then every rank loads it onto the CPU.
//
//   rankwise-run --nproc-per-node 2 build/examples/save_and_log [ckpt.pt]
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "rankwise/rankwise.h"

int run(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "ckpt.pt";
  auto& group = rankwise::dist::init();
  const int rank = group.rank();

  torch::manual_seed(0);
  torch::nn::Linear model(4, 1);
  rankwise::parallel::DistributedDataParallel ddp(model);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));

  torch::manual_seed(50 + rank);  // each rank holds different data
  auto x = torch::randn({6, 4});
  auto y = torch::randn({6, 1});

  // --- one training step ---------------------------------------------------
  opt.zero_grad();
  auto loss = torch::mse_loss(ddp.forward(x), y);
  loss.backward();  // gradients are averaged across ranks here
  opt.step();

  // --- a metric that is honest across all ranks ----------------------------
  auto local = torch::tensor({loss.item<double>() * x.size(0), static_cast<double>(x.size(0))},
                             torch::kFloat64);
  rankwise::dist::all_reduce(local, rankwise::dist::ReduceOp::kSum);  // sum losses AND sample counts
  const double global_loss = local[0].item<double>() / local[1].item<double>();
  rankwise::print("rank {}: my loss {:.4f} | true loss over all {} samples {:.4f}", rank,
                  loss.item<double>(), static_cast<int64_t>(local[1].item<double>()), global_loss);

  // --- exactly one rank writes the file; everyone waits inside save() ------
  rankwise::checkpoint::Checkpoint state;
  state.insert("model", rankwise::checkpoint::state_dict(*ddp.module()));  // unwrapped: no prefix
  state.insert("opt", rankwise::checkpoint::optimizer_state_dict(opt));
  state.insert("step", int64_t{1});
  rankwise::checkpoint::save(path, state);

  auto ckpt = rankwise::checkpoint::load(path);
  std::vector<std::string> keys;
  for (const auto& entry : ckpt.at("model").toGenericDict()) {
    keys.push_back("'" + entry.key().toStringRef() + "'");
  }
  // As Python prints list(ckpt["model"]): ['weight', 'bias'].
  rankwise::print("rank {}: loaded keys [{}]", rank, fmt::join(keys, ", "));
  return 0;
}

// run_main reports an uncaught exception (bad environment, unwritable path)
// to the launcher, which shows it as the root cause.
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, run); }
