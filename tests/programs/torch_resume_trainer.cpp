// torch_resume_trainer OPTIMIZER DIR [KILL_AT_STEP]: a small DDP training
// run (synthetic data, dropout, 3 epochs) with the optimizers and schedules
// people use, checkpointed every 4 steps and at each epoch end through
// CheckpointManager + TrainingState, resuming from DIR's latest checkpoint
// when there is one. OPTIMIZER:
//   adam_halving  Adam, learning rate halved by hand at every epoch end
//   sgd_steplr    SGD with momentum, torch::optim::StepLR every 3 steps
//   adamw         AdamW with weight decay 0.1
// With KILL_AT_STEP, the last rank SIGKILLs itself after that step unless
// DIR/killed exists (it creates it first), so a restart does not die again.
// At the end rank 0 writes DIR/final.pt (the captured training state).
#include <torch/torch.h>

#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>

#include "rankwise/rankwise.h"

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

int train(int argc, char** argv) {
  if (argc < 3) throw rankwise::ConfigError("usage: torch_resume_trainer OPTIMIZER DIR [KILL_AT_STEP]");
  const std::string kind = argv[1];
  const std::string dir = argv[2];
  const int64_t kill_at = argc > 3 ? std::stoll(argv[3]) : 0;
  auto& group = rankwise::dist::init();
  constexpr int64_t kSamples = 120, kBatch = 4, kEpochs = 3;

  torch::manual_seed(0);  // the same data and initial model on every rank
  const auto inputs = torch::randn({kSamples, 8});
  const auto labels = torch::randint(0, 4, {kSamples});
  auto model = std::make_shared<Net>();
  rankwise::parallel::DistributedDataParallel ddp(model);
  torch::manual_seed(100 + group.rank());  // per-rank dropout masks

  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<torch::optim::StepLR> scheduler;
  if (kind == "adam_halving") {
    optimizer = std::make_unique<torch::optim::Adam>(ddp.parameters(), torch::optim::AdamOptions(0.02));
  } else if (kind == "sgd_steplr") {
    optimizer = std::make_unique<torch::optim::SGD>(ddp.parameters(),
                                                    torch::optim::SGDOptions(0.2).momentum(0.9));
    scheduler = std::make_unique<torch::optim::StepLR>(*optimizer, 3, 0.7);
  } else if (kind == "adamw") {
    optimizer = std::make_unique<torch::optim::AdamW>(
        ddp.parameters(), torch::optim::AdamWOptions(0.02).weight_decay(0.1));
  } else {
    throw rankwise::ConfigError("unknown optimizer " + kind);
  }

  rankwise::checkpoint::CheckpointManager checkpoints(
      rankwise::checkpoint::CheckpointManagerOptions(dir).every_n_steps(4).keep_last(2));
  rankwise::checkpoint::TrainingState state;
  state.model = ddp.module().get();
  state.optimizer = optimizer.get();
  state.lr_scheduler = scheduler.get();
  std::string latest;
  if (auto checkpoint = checkpoints.load_latest(&latest)) {
    rankwise::checkpoint::restore(*checkpoint, state);
    rankwise::print0("resumed at step {} (epoch {}, position {})", state.step, state.epoch,
                     state.position);
  }
  rankwise::data::DistributedSampler sampler(kSamples, rankwise::data::DistributedSamplerOptions().seed(7));
  const bool killer = kill_at > 0 && group.rank() == group.world_size() - 1;

  while (state.epoch < kEpochs) {
    sampler.set_epoch(state.epoch);
    const auto indices = sampler.indices();
    const auto n = static_cast<int64_t>(indices.size());
    for (int64_t begin = state.position; begin < n; begin += kBatch) {
      const int64_t end = std::min(n, begin + kBatch);
      auto index = torch::tensor(std::vector<int64_t>(indices.begin() + begin, indices.begin() + end));
      optimizer->zero_grad();
      torch::cross_entropy_loss(ddp.forward(inputs.index_select(0, index)), labels.index_select(0, index))
          .backward();
      optimizer->step();
      if (scheduler) scheduler->step();
      state.step += 1;
      state.position = end;
      if (killer && state.step == kill_at && !exists(dir + "/killed")) {
        std::ofstream(dir + "/killed") << "killed at step " << kill_at << "\n";
        ::raise(SIGKILL);
      }
      if (end < n && checkpoints.should_save(state.step, /*epoch_end=*/false)) {
        checkpoints.save(rankwise::checkpoint::capture(state), state.step);
      }
    }
    ddp.join();
    if (kind == "adam_halving") {  // a hand-written schedule: its state is the optimizer's lr
      for (auto& g : optimizer->param_groups()) g.options().set_lr(g.options().get_lr() * 0.5);
    }
    state.epoch += 1;
    state.position = 0;
    if (checkpoints.should_save(state.step, /*epoch_end=*/true)) {
      checkpoints.save(rankwise::checkpoint::capture(state), state.step);
    }
  }
  rankwise::checkpoint::save(dir + "/final.pt", rankwise::checkpoint::capture(state));
  rankwise::print0("done at step {}", state.step);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
