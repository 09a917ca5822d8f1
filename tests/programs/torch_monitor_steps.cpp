// torch_monitor_steps: a training loop for the rankwise-run --monitor tests
// (tests/unit/launch/watch/run_monitor_test.cpp). Every rank trains a small MLP wrapped in
// rankwise::parallel::DistributedDataParallel on random data and calls
// rankwise::monitor::record_step after each step.
//
//   torch_monitor_steps SECONDS [SLOW_RANK SLEEP_MS]
//
// Every rank prints "pid R PID" first; rank 0 prints "step N" after its
// steps 1, 25, 50, 75, ...; every rank prints "steps N" last, N its
// record_step() calls. With SLOW_RANK, that rank sleeps SLEEP_MS before each
// step's forward (a straggler: the others wait for it in DDP's all_reduces). The loop ends
// on every rank at the same step, the first at which some rank has trained
// SECONDS seconds (one all_reduce of a flag per step).
#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "rankwise/parallel/ddp.h"
#include "rankwise/monitor/step_stats.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/run_main.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(128, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: torch_monitor_steps SECONDS [SLOW_RANK SLEEP_MS]\n");
    return 2;
  }
  const double seconds = std::stod(argv[1]);
  const int slow_rank = argc > 3 ? std::stoi(argv[2]) : -1;
  const int sleep_ms = argc > 3 ? std::stoi(argv[3]) : 0;
  rankwise::dist::init();
  const int rank = rankwise::dist::rank();
  std::printf("pid %d %d\n", rank, static_cast<int>(::getpid()));
  std::fflush(stdout);
  torch::manual_seed(rank);
  rankwise::parallel::DistributedDataParallel ddp(Net{});
  torch::optim::SGD optimizer(ddp.parameters(), 0.01);
  const auto start = std::chrono::steady_clock::now();
  int64_t step = 1;
  for (;; ++step) {
    if (rank == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    const auto x = torch::randn({64, 128});
    const auto y = torch::randint(0, 10, {64});
    optimizer.zero_grad();
    auto loss = torch::cross_entropy_loss(ddp.forward(x), y);
    loss.backward();
    optimizer.step();
    rankwise::monitor::record_step(64, loss.item<double>());
    if ((step == 1 || step % 25 == 0) && rank == 0) {
      std::printf("step %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto done = torch::tensor({elapsed >= seconds ? 1 : 0}, torch::kInt32);
    rankwise::dist::all_reduce(done, rankwise::dist::ReduceOp::kMax);
    if (done.item<int>() != 0) break;
  }
  std::printf("steps %lld\n", static_cast<long long>(step));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, run); }
