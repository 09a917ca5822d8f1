// torch_fabric_strategy DIR [KILL_AT_STEP [EPOCHS]] [Fabric flags: --strategy S,
// --accumulate N, --checkpoint-async, ...]: one Fabric training loop under
// any strategy, with Lightning's two-call setup (setup_module, Adam over
// model.parameters(), setup_optimizers), a StepLR the Fabric tracks, dropout
// that differs per rank (seed_per_rank) and accumulation as a policy
// (fabric.optimizer_step()). 27 samples per rank in batches of 4 make 7
// batches per epoch, 3 epochs (or EPOCHS); checkpoints every 5 steps and at epoch ends
// in DIR/ckpt, resumed from the latest one (Resume::kLatest). With
// KILL_AT_STEP the last rank SIGKILLs itself once KILL_AT_STEP steps are
// done, unless DIR/killed exists (it creates it first), so a restarted job
// does not die again. The run's last checkpoint is its final state (for
// rankwise-ckpt diff).
#include <torch/data/datasets/base.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/schedulers/step_lr.h>

#include <signal.h>

#include <fstream>
#include <string>

#include "fabric_program_support.h"
#include "rankwise/rankwise.h"

namespace {

using rankwise::test::exists;
using Net = rankwise::test::DropoutNet;
using rankwise::test::Samples;

constexpr int64_t kPerRank = 27, kBatch = 4;

int train(int argc, char** argv) {
  rankwise::Fabric fabric(argc, argv, rankwise::FabricOptions()
                                          .device("cpu")
                                          .seed(3)
                                          .seed_per_rank(true)
                                          .print_header(false)
                                          .checkpoint_every(5)
                                          .keep_last(2)
                                          .resume(rankwise::Resume::kLatest));
  if (argc < 2) {
    throw rankwise::ConfigError("usage: torch_fabric_strategy DIR [KILL_AT_STEP [EPOCHS]] [Fabric flags]");
  }
  const std::string dir = argv[1];
  const int64_t kill_at = argc > 2 ? std::stoll(argv[2]) : 0;
  const int64_t epochs = argc > 3 ? std::stoll(argv[3]) : 3;
  if (fabric.options().checkpoint_dir() != dir + "/ckpt") {
    throw rankwise::ConfigError("torch_fabric_strategy: pass --checkpoint-dir DIR/ckpt");
  }
  auto model = fabric.setup_module(std::make_shared<Net>());
  torch::optim::Adam optimizer(model.parameters(), torch::optim::AdamOptions(0.02));
  torch::optim::StepLR scheduler(optimizer, 2, 0.7);
  fabric.setup_optimizers(optimizer);
  fabric.track(scheduler);
  auto loader = fabric.setup_dataloader(Samples(kPerRank * fabric.world_size()), kBatch);
  const bool killer = kill_at > 0 && fabric.rank() == fabric.world_size() - 1;
  for (int64_t epoch : fabric.epochs(epochs)) {
    (void)epoch;
    for (auto& batch : loader) {
      if (killer && fabric.step() == kill_at && !exists(dir + "/killed")) {
        std::ofstream(dir + "/killed") << "killed after step " << kill_at << "\n";
        ::raise(SIGKILL);
      }
      fabric.backward(torch::nn::functional::cross_entropy(model(batch.data), batch.target));
      if (!fabric.is_accumulating()) fabric.clip_gradients(1.0);
      if (fabric.optimizer_step()) scheduler.step();
    }
  }
  fabric.print0("done at step {}", fabric.step());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
