// rankwise DDP on the benchmark job of bench/ddp_reference.py (same models,
// batch, threads and optimizer). Prints on rank 0:
//   rankwise <model> world=<W> samples_per_s=<X>
// Usage: bench_ddp MODEL STEPS BATCH [GLOO_THREADS [SAVE_EVERY sync|async DIR]]
// (MODEL: mlp | wide; GLOO_THREADS: InitOptions::gloo_threads, 0 or absent:
// rankwise's default); run through rankwise-run. With SAVE_EVERY, a
// CheckpointManager in DIR (keep_last 2) saves the model's and the
// optimizer's state every SAVE_EVERY timed steps with save() or save_async()
// (bench/run_async_save.sh), waited for before the clock stops.
#include <torch/torch.h>

#include <chrono>
#include <optional>

#include "rankwise/rankwise.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5 && argc != 8) {
    std::fprintf(stderr, "usage: bench_ddp mlp|wide STEPS BATCH [GLOO_THREADS [SAVE_EVERY sync|async DIR]]\n");
    return 2;
  }
  const std::string model_name = argv[1];
  const int64_t steps = std::stoll(argv[2]);
  const int64_t batch = std::stoll(argv[3]);
  torch::set_num_threads(1);
  rankwise::dist::InitOptions options;
  if (argc >= 5 && std::stoi(argv[4]) > 0) options.gloo_threads(std::stoi(argv[4]));
  const int64_t save_every = argc == 8 ? std::stoll(argv[5]) : 0;
  const bool async = argc == 8 && std::string(argv[6]) == "async";
  auto& group = rankwise::dist::init(options);

  torch::manual_seed(0);
  torch::nn::Sequential net;
  if (model_name == "mlp") {
    net = torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                                torch::nn::Linear(256, 128), torch::nn::ReLU(),
                                torch::nn::Linear(128, 10));
  } else {
    net->push_back(torch::nn::Linear(784, 2048));
    net->push_back(torch::nn::ReLU());
    for (int i = 0; i < 3; ++i) {
      net->push_back(torch::nn::Linear(2048, 2048));
      net->push_back(torch::nn::ReLU());
    }
    net->push_back(torch::nn::Linear(2048, 10));
  }
  // As ddp_reference.py: the single-process baseline is the plain module.
  std::optional<rankwise::parallel::DistributedDataParallel<torch::nn::Sequential>> ddp;
  if (group.world_size() > 1) ddp.emplace(net);
  auto forward = [&](const torch::Tensor& x) { return ddp ? ddp->forward(x) : net->forward(x); };
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::manual_seed(1 + group.rank());
  // 50 distinct batches, reused cyclically (as ddp_reference.py).
  const int64_t distinct = std::min<int64_t>(steps, 50);
  auto x = torch::randn({distinct, batch, 784});
  auto y = torch::randint(0, 10, {distinct, batch});

  auto step = [&](int64_t i) {
    opt.zero_grad();
    torch::cross_entropy_loss(forward(x[i % distinct]), y[i % distinct]).backward();
    opt.step();
  };
  for (int64_t i = 0; i < std::min<int64_t>(5, steps); ++i) step(i);
  std::optional<rankwise::checkpoint::CheckpointManager> checkpoints;
  if (save_every > 0) checkpoints.emplace(rankwise::checkpoint::CheckpointManagerOptions(argv[7]).keep_last(2));
  auto save = [&](int64_t i) {
    rankwise::checkpoint::Checkpoint state;
    state.insert("model", rankwise::checkpoint::state_dict(*net));
    state.insert("optimizer", rankwise::checkpoint::optimizer_state_dict(opt));
    if (async) {
      checkpoints->save_async(state, i);
    } else {
      checkpoints->save(state, i);
    }
  };
  rankwise::dist::barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    step(i);
    if (save_every > 0 && (i + 1) % save_every == 0) save(i + 1);
  }
  if (checkpoints) checkpoints->wait();
  rankwise::dist::barrier();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rankwise::print0("rankwise {} world={} samples_per_s={:.1f}", model_name, group.world_size(),
                   static_cast<double>(steps * batch * group.world_size()) / elapsed);
  return 0;
}
