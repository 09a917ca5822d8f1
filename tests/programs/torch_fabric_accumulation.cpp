// torch_fabric_accumulation ACCUM EVERY DIR [KILL_AT_STEP [SAVE_EVERY]]: a Fabric training
// run with gradient accumulation, the loop users write: ddp.no_sync() on
// ACCUM-1 of every ACCUM batches (counted by fabric.step()), Adam and StepLR
// stepped on the ACCUM-th. 27 samples per rank in batches of 4 make 7
// batches per epoch, 3 epochs; checkpoints every EVERY steps and at epoch
// ends in DIR/ckpt, resumed from the latest one (Resume::kLatest). Dropout
// differs per rank (seed_per_rank). With KILL_AT_STEP the last rank SIGKILLs
// itself once KILL_AT_STEP batches are done, unless DIR/killed exists (it
// creates it first), so a restarted job does not die again. At the end every
// rank joins in writing DIR/final.pt (the captured training state, for
// tests/e2e/compare_checkpoints.py). With SAVE_EVERY, the loop body also
// calls fabric.save() after the optimizer step of every SAVE_EVERY-th batch.
// A 6th argument "async" saves in the background (--checkpoint-async).
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

constexpr int64_t kPerRank = 27, kBatch = 4, kEpochs = 3;

int train(int argc, char** argv) {
  if (argc < 4) {
    throw rankwise::ConfigError("usage: torch_fabric_accumulation ACCUM EVERY DIR [KILL_AT_STEP]");
  }
  const int64_t accum = std::stoll(argv[1]);
  const int64_t every = std::stoll(argv[2]);
  const std::string dir = argv[3];
  const int64_t kill_at = argc > 4 ? std::stoll(argv[4]) : 0;
  const int64_t save_every = argc > 5 ? std::stoll(argv[5]) : 0;
  const bool async = argc > 6 && std::string(argv[6]) == "async";
  rankwise::Fabric fabric(rankwise::FabricOptions()
                              .device("cpu")
                              .seed(3)
                              .seed_per_rank(true)
                              .print_header(false)
                              .checkpoint_dir(dir + "/ckpt")
                              .checkpoint_every(every)
                              .keep_last(2)
                              .checkpoint_async(async)
                              .resume(rankwise::Resume::kLatest));
  auto model = std::make_shared<Net>();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.02));
  torch::optim::StepLR scheduler(optimizer, 2, 0.7);
  auto ddp = fabric.setup(model, optimizer);
  fabric.track(scheduler);
  auto loader = fabric.setup_dataloader(Samples(kPerRank * fabric.world_size()), kBatch);
  const bool killer = kill_at > 0 && fabric.rank() == fabric.world_size() - 1;

  auto micro_batch = [&](const torch::data::Example<>& batch) {
    fabric.backward(torch::nn::functional::cross_entropy(ddp.forward(batch.data), batch.target));
  };
  for (int64_t epoch : fabric.epochs(kEpochs)) {
    (void)epoch;
    for (auto& batch : loader) {
      if (killer && fabric.step() == kill_at && !exists(dir + "/killed")) {
        std::ofstream(dir + "/killed") << "killed after step " << kill_at << "\n";
        ::raise(SIGKILL);
      }
      if ((fabric.step() + 1) % accum == 0) {  // the optimizer's step
        micro_batch(batch);
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
        if (save_every > 0 && (fabric.step() + 1) % save_every == 0) fabric.save();
      } else {
        auto guard = ddp.no_sync();
        micro_batch(batch);
      }
    }
  }
  rankwise::test::save_final(dir + "/final.pt", fabric, *model, optimizer, scheduler);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
