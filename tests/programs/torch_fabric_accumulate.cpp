// torch_fabric_accumulate ACCUM BATCH EVERY DIR [KILL_AT_STEP]: a Fabric run
// with gradient accumulation as a policy (FabricOptions::accumulate(ACCUM)):
// the loop has no no_sync() of its own, fabric.optimizer_step() steps SGD with
// momentum, and a StepLR is stepped whenever it did. 48 samples per rank in
// batches of BATCH, 2 epochs, no dropout; checkpoints every EVERY steps
// (optimizer steps) and at epoch ends in DIR/ckpt, resumed from the latest
// (Resume::kLatest). With KILL_AT_STEP the last rank SIGKILLs itself at the
// first batch after step KILL_AT_STEP that accumulates (mid-group), unless
// DIR/killed exists (it creates it first). At the end every rank joins in
// writing DIR/final.pt (the captured training state).
#include <torch/data/datasets/base.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/schedulers/step_lr.h>
#include <torch/optim/sgd.h>

#include <signal.h>

#include <fstream>
#include <string>

#include "fabric_program_support.h"
#include "rankwise/rankwise.h"

namespace {

using rankwise::test::exists;
using rankwise::test::Samples;

constexpr int64_t kPerRank = 48, kEpochs = 2;

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(2, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

int train(int argc, char** argv) {
  if (argc < 5) {
    throw rankwise::ConfigError("usage: torch_fabric_accumulate ACCUM BATCH EVERY DIR [KILL_AT_STEP]");
  }
  const int64_t accum = std::stoll(argv[1]), batch = std::stoll(argv[2]), every = std::stoll(argv[3]);
  const std::string dir = argv[4];
  const int64_t kill_at = argc > 5 ? std::stoll(argv[5]) : 0;
  rankwise::Fabric fabric(rankwise::FabricOptions()
                              .device("cpu")
                              .seed(5)
                              .print_header(false)
                              .accumulate(accum)
                              .checkpoint_dir(dir + "/ckpt")
                              .checkpoint_every(every)
                              .keep_last(2)
                              .resume(rankwise::Resume::kLatest));
  auto model = std::make_shared<Net>();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::StepLR scheduler(optimizer, 2, 0.7);
  auto ddp = fabric.setup(model, optimizer);
  fabric.track(scheduler);
  auto loader = fabric.setup_dataloader(Samples(kPerRank * fabric.world_size()), batch);
  const bool killer = kill_at > 0 && fabric.rank() == fabric.world_size() - 1;
  for (int64_t epoch : fabric.epochs(kEpochs)) {
    (void)epoch;
    for (auto& b : loader) {
      if (killer && fabric.step() == kill_at && fabric.is_accumulating() && !exists(dir + "/killed")) {
        std::ofstream(dir + "/killed") << "killed after step " << kill_at << "\n";
        ::raise(SIGKILL);
      }
      fabric.backward(torch::nn::functional::cross_entropy(ddp.forward(b.data), b.target));
      if (fabric.optimizer_step()) scheduler.step();
    }
  }
  rankwise::test::save_final(dir + "/final.pt", fabric, *model, optimizer, scheduler);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
