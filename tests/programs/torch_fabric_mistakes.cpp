// torch_fabric_mistakes: a Fabric training loop (default options: checked
// collectives, 300 s collective timeout) with one of the mistakes users make,
// for the launcher's deadlock and root-cause tests
// (tests/unit/launch/watch/deadlock_test.cpp). 3 epochs of 8 batches per rank.
//
//   torch_fabric_mistakes barrier|all-reduce|broadcast|metrics mid|end
//       Rank 0 alone calls fabric.barrier(), fabric.all_reduce(metric),
//       fabric.broadcast(t) or a MetricCollection's compute() inside
//       `if (fabric.rank() == 0)`: after step 3
//       (mid) or after epoch 1's batches (end). Prints "site LINE" first.
//   torch_fabric_mistakes break | return | exit
//       Rank 0 alone stops early: breaks out of fabric.epochs() after epoch 1
//       and returns 0 (`break`), returns 0 from the training function at step
//       3 (`return`), or calls std::exit(0) there (`exit`). The others go on.
//       Prints "site LINE" (the training loop's line, where rankwise reports
//       the others' collectives inside DDP).
//   torch_fabric_mistakes first-throws
//       Rank 0's block in fabric.rank_zero_first() throws ("the download
//       failed") before training; the others wait for it there.
//   torch_fabric_mistakes first-slow
//       Rank 0's block in fabric.rank_zero_first(block, false, 500 ms)
//       computes for 5 s: the others stop waiting after 500 ms.
//   torch_fabric_mistakes batch-size
//       The last rank sets up its training loader with batch size 4, the
//       others with 2.
//   torch_fabric_mistakes preempted DIR
//       Checkpoints in DIR, the preemption check after every batch: in step
//       3 rank 0 sends SIGTERM to rankwise-run (its parent), as a scheduler
//       would. Run with RANKWISE_CHECKPOINT_FAULT=fail_at=... to fail the
//       preemption's save.
//   torch_fabric_mistakes slow SECONDS
//       Rank 1 computes SECONDS in step 3 (outside any collective) while the
//       others wait for it in DDP's gradient all_reduce; everyone finishes.
#include <torch/torch.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rankwise/rankwise.h"

namespace {

// Sample i: x = [i, 1], y = i % 2.
class Toy : public torch::data::datasets::BatchDataset<Toy, torch::data::Example<>> {
 public:
  explicit Toy(int64_t n) : n_(n) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto i = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
    auto x = torch::stack({i.to(torch::kFloat32) / n_, torch::ones({i.size(0)})}, 1);
    return {x, i.remainder(2)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

void site(const rankwise::Fabric& fabric, int line) {
  fabric.print0("site {}", line);
  std::fflush(stdout);
}

// Busy for `seconds` (a long step that makes progress: no collective, no sleep).
void compute(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto a = torch::randn({64, 64});
  while (std::chrono::steady_clock::now() < end) a = torch::tanh(a.mm(a) / 64);
}

// Rank 0's collective alone.
void alone(rankwise::Fabric& fabric, const std::string& what) {
  if (fabric.rank() != 0) return;
  auto t = torch::ones({4});
  if (what == "barrier") {
    site(fabric, __LINE__ + 1);
    fabric.barrier();
  } else if (what == "all-reduce") {
    site(fabric, __LINE__ + 1);
    fabric.all_reduce(0.5);
  } else if (what == "metrics") {
    rankwise::metrics::MetricCollection metrics;
    metrics.add("loss", std::make_shared<rankwise::metrics::Mean>())->update(t);
    site(fabric, __LINE__ + 1);
    metrics.compute();
  } else {
    site(fabric, __LINE__ + 1);
    fabric.broadcast(t);
  }
}

int train(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string arg = argc > 2 ? argv[2] : "";
  rankwise::FabricOptions options = rankwise::FabricOptions().print_header(false).seed(3);
  if (mode == "preempted") {
    options.checkpoint_dir(arg).progress(rankwise::monitor::ProgressBarOptions().every_n_steps(1).style(
        rankwise::monitor::ProgressBarStyle::kOff));
  }
  rankwise::Fabric fabric(options);
  auto net = torch::nn::Linear(2, 2);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
  auto ddp = fabric.setup(net, optimizer);
  const bool last = fabric.rank() == fabric.world_size() - 1;
  auto loader = fabric.setup_dataloader(Toy(16 * fabric.world_size()), mode == "batch-size" && last ? 4 : 2);
  if (mode == "first-slow") {
    fabric.rank_zero_first([&] { if (fabric.rank() == 0) compute(5); }, false,
                           std::chrono::milliseconds(500));
  }
  if (mode == "first-throws") {
    fabric.rank_zero_first([&] {
      if (fabric.rank() == 0) throw rankwise::ConfigError("the download failed: no network");
    });
  }
  const bool one_rank = fabric.rank() == 0;
  const int loop_line = __LINE__ + 2;
  for (int64_t epoch : fabric.epochs(3)) {
    for (auto& batch : loader) {
      if (fabric.step() == 3) {
        if (mode == "return" && one_rank) return 0;
        if (mode == "exit" && one_rank) std::exit(0);
        if (mode == "slow" && fabric.rank() == 1) compute(std::stod(arg));
        if (mode == "preempted" && one_rank) ::kill(::getppid(), SIGTERM);
      }
      optimizer.zero_grad();
      auto loss = torch::cross_entropy_loss(ddp.forward(batch.data), batch.target);
      if (epoch == 0 && fabric.step() == 0) site(fabric, loop_line);
      fabric.backward(loss);
      optimizer.step();
      if (arg == "mid" && fabric.step() == 3) alone(fabric, mode);
    }
    if (arg == "end" && epoch == 0) alone(fabric, mode);
    if (mode == "break" && one_rank) break;
  }
  fabric.print0("done");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
