// torch_hang_cases: the mistakes that used to leave ranks waiting silently,
// for the hang-report tests (tests/unit/launch/watch/hang_reports_test.cpp). Run under
// rankwise-run; every mode uses a 3 s collective timeout (HANG_CASE_TIMEOUT_S
// seconds when set: the launcher's --hang-timeout tests use a long one) and
// prints the line of its key collective as "site LINE" from rank 0 before it
// starts.
//
//   torch_hang_cases rank0-barrier [return]
//       Every rank does one all_reduce; then rank 0 calls barrier() inside
//       `if (rank == 0)` while the others sleep 30 s, or with `return` return
//       from main at once.
//   torch_hang_cases sigstop
//       2 ranks all_reduce in a loop; rank 1 stops itself (SIGSTOP) at step 5
//       (after its fifth all_reduce).
//   torch_hang_cases ddp-sigstop
//       2 ranks train a DistributedDataParallel Linear; rank 1 stops itself
//       (SIGSTOP) in step 6 after its forward, so rank 0 waits in the
//       gradients' all_reduce of step 6.
//   torch_hang_cases shape | op
//       Rank 1 passes a tensor of another shape to all_reduce (`shape`), or
//       calls broadcast where the others call all_reduce (`op`).
//   torch_hang_cases early-stop
//       Early stopping decided on rank 0 only: it leaves the epoch loop after
//       epoch 2 and returns; the others go on all_reducing their loss.
//   torch_hang_cases monitored [all]
//       4 ranks: ranks 1 and 2 sleep 30 s; ranks 0 and 3 call
//       monitored_barrier("eval-done", 2 s, wait_all_ranks = `all`).
//   torch_hang_cases solo-work
//       2 ranks: rank 0 works 4 s outside any collective while rank 1 waits in
//       a barrier; then rank 0 joins it and both succeed (not a hang).
//   torch_hang_cases fsdp-throws
//       FullyShardedDataParallel over 3 units; rank 1's unit '1' throws in
//       the second step's forward.
//   torch_hang_cases monitored-exit
//       2 ranks: rank 1 returns from main; rank 0 calls
//       monitored_barrier("eval-done", 20 s) and should fail at once.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "rankwise/parallel/ddp.h"
#include "rankwise/parallel/fully_sharded.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/run_main.h"

namespace {

// A block whose forward throws on its second call where `fail` is set.
struct FaultyBlockImpl : torch::nn::Module {
  explicit FaultyBlockImpl(bool fail) : fc(register_module("fc", torch::nn::Linear(4, 4))), fail(fail) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = fc(x);
    if (fail && ++calls == 2) throw std::runtime_error("torch_hang_cases: block 1 failed on this rank");
    return y;
  }
  torch::nn::Linear fc;
  bool fail;
  int calls = 0;
};
TORCH_MODULE(FaultyBlock);

void sleep_s(int seconds) { std::this_thread::sleep_for(std::chrono::seconds(seconds)); }

void site(int line) {
  if (rankwise::dist::rank() == 0) {
    std::printf("site %d\n", line);
    std::fflush(stdout);
  }
}

int run(const std::string& mode, const std::string& variant) {
  const char* timeout_s = std::getenv("HANG_CASE_TIMEOUT_S");
  auto& group = rankwise::dist::init(
      rankwise::dist::InitOptions().timeout(std::chrono::seconds(timeout_s ? std::atoi(timeout_s) : 3)));
  const int rank = group.rank();
  auto one = torch::ones({2});
  if (mode == "rank0-barrier") {
    group.all_reduce(one);
    if (rank == 0) {
      site(__LINE__ + 1);
      group.barrier();
    } else if (variant != "return") {
      sleep_s(30);
    }
    return 0;
  }
  if (mode == "sigstop") {
    for (int step = 0; step < 1000; ++step) {
      if (rank == 1 && step == 5) {
        // Past the progress thread's 20 ms batching (so that the store shows step
        // 5), before its next heartbeat (so that the heartbeat is seen to stop).
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        ::raise(SIGSTOP);
      }
      if (step == 0) site(__LINE__ + 1);
      group.all_reduce(one);
    }
    return 0;
  }
  if (mode == "ddp-sigstop") {
    torch::manual_seed(0);
    rankwise::parallel::DistributedDataParallel ddp(torch::nn::Linear(4, 2));
    for (int step = 1; step < 1000; ++step) {
      auto loss = ddp.forward(torch::ones({3, 4})).sum();
      if (rank == 1 && step == 6) {
        std::this_thread::sleep_for(std::chrono::milliseconds(400));  // as in sigstop
        ::raise(SIGSTOP);
      }
      loss.backward();
    }
    return 0;
  }
  if (mode == "shape" || mode == "op") {
    group.all_reduce(one);
    auto tensor = rank == 1 && mode == "shape" ? torch::ones({3}) : torch::ones({2});
    if (rank == 1 && mode == "op") {
      group.broadcast(tensor, 0);
    } else {
      site(__LINE__ + 1);
      group.all_reduce(tensor);
    }
    group.barrier();
    return 0;
  }
  if (mode == "early-stop") {
    for (int epoch = 0; epoch < 10; ++epoch) {
      auto loss = torch::tensor({1.0 / (epoch + 1)});
      if (epoch == 0) site(__LINE__ + 1);
      group.all_reduce(loss);
      // The seed's mistake: a decision from this rank's own view.
      if (rank == 0 && epoch == 2) break;
    }
    return 0;
  }
  if (mode == "monitored") {
    if (rank == 1 || rank == 2) {
      sleep_s(30);
      return 0;
    }
    site(__LINE__ + 1);
    group.monitored_barrier("eval-done", std::chrono::seconds(2), variant == "all");
    return 0;
  }
  if (mode == "solo-work") {
    group.all_reduce(one);
    if (rank == 0) sleep_s(4);
    group.barrier();
    return 0;
  }
  if (mode == "monitored-exit") {
    group.barrier();
    if (rank == 1) return 0;
    site(__LINE__ + 1);
    group.monitored_barrier("eval-done", std::chrono::seconds(20));
    return 0;
  }
  if (mode == "fsdp-throws") {  // rank 1's second unit throws in the second step's forward
    torch::nn::Sequential net(torch::nn::Linear(4, 4), FaultyBlock(rank == 1), torch::nn::Linear(4, 1));
    rankwise::parallel::FullyShardedDataParallel<torch::nn::Sequential> fsdp(net);
    torch::optim::SGD optimizer(fsdp.parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      fsdp(torch::ones({2, 4})).sum().backward();
      optimizer.step();
      optimizer.zero_grad();
    }
    return 0;
  }
  std::fprintf(stderr, "torch_hang_cases: unknown mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  return rankwise::run_main(argc, argv, [](int argc, char** argv) {
    if (argc < 2) {
      std::fprintf(stderr, "usage: torch_hang_cases MODE [VARIANT]\n");
      return 2;
    }
    return run(argv[1], argc > 2 ? argv[2] : "");
  });
}
