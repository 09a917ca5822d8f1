// torch_c10d_warning: a worker that makes c10d's Reducer warn. One training
// step of DistributedDataParallel with find_unused_parameters(true) on a
// model whose parameters are all used: the Reducer warns once (TORCH_WARN_ONCE)
// that the option found nothing unused. With argument "thread" the step runs
// in a second thread, which only the DDP forward gives rankwise's c10
// warning handler (without it: c10's default one, whose output reaches
// stderr raw where libtorch has no glog, as PyPI's 2.x); otherwise in the
// main thread.
#include <torch/torch.h>

#include <chrono>
#include <string>
#include <thread>

#include "rankwise/parallel/ddp.h"
#include "rankwise/dist/process_group.h"

int main(int argc, char** argv) {
  rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
  torch::manual_seed(0);
  torch::nn::Linear model(4, 2);
  rankwise::parallel::DistributedDataParallel ddp(
      model, rankwise::parallel::DistributedDataParallelOptions().find_unused_parameters(true));
  auto step = [&ddp] { ddp.forward(torch::randn({3, 4})).sum().backward(); };
  if (argc > 1 && std::string(argv[1]) == "thread") {
    std::thread(step).join();
  } else {
    step();
  }
  rankwise::dist::barrier();
  return 0;
}
