// Port of seed 001's ddp_resume.py: load on every rank, onto the CPU, BEFORE
// wrapping in DDP (whose construction-time broadcast then confirms agreement).
//
//   rankwise-run --nproc-per-node 2 build/examples/resume [ckpt.pt]
#include <torch/torch.h>

#include <sys/stat.h>

#include "rankwise/rankwise.h"

int run(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "ckpt.pt";
  auto& group = rankwise::dist::init();
  const int rank = group.rank();

  torch::manual_seed(0);
  torch::nn::Linear model(4, 1);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));

  int64_t start_step = 0;
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    auto ckpt = rankwise::checkpoint::load(path);  // on every rank, onto the CPU
    rankwise::checkpoint::load_state_dict(*model, rankwise::checkpoint::to_state_dict(ckpt.at("model")));
    rankwise::checkpoint::load_optimizer_state_dict(opt, ckpt.at("opt"));
    start_step = ckpt.at("step").toInt();
  }

  rankwise::parallel::DistributedDataParallel ddp(model);  // broadcasts rank 0's weights
  rankwise::print("rank {}: resuming from step {}, weight checksum {:.6f}", rank, start_step,
                  ddp.module()->weight.sum().item<double>());
  return 0;
}

// run_main reports an uncaught exception (bad environment, unwritable path)
// to the launcher, which shows it as the root cause.
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, run); }
