// torch_fabric_argv [ARGS...]: rankwise::Fabric(argc, argv) followed by the
// program's own "parser". Prints on rank 0 "program sees: A B ..." (the
// arguments the Fabric left) and "seed N". With --help in what it sees, it
// prints "program options: --epochs N" and exits 0, as a CLI11 program would;
// with --no-parser it skips that and goes on to setup() (which then exits
// with 0 after the Fabric's --help) and prints "trained" after one epoch.
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <string>

#include "rankwise/rankwise.h"

int main(int argc, char** argv) {
  return rankwise::run_main(argc, argv, [](int argc, char** argv) {
    rankwise::Fabric fabric(argc, argv, rankwise::FabricOptions().print_header(false));
    std::string seen;
    bool help = false, parser = true;
    for (int i = 1; i < argc; ++i) {
      seen += std::string(" ") + argv[i];
      help = help || std::string(argv[i]) == "--help";
      parser = parser && std::string(argv[i]) != "--no-parser";
    }
    if (argv[argc] != nullptr) throw rankwise::Error("argv[argc] is not null");
    if (help && parser) {
      rankwise::print0("program options: --epochs N");
      return 0;
    }
    rankwise::print0("program sees:{}", seen);
    rankwise::print0("seed {}", fabric.options().seed());
    torch::nn::Linear model(2, 1);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    auto ddp = fabric.setup(model, optimizer);
    for (int64_t epoch : fabric.epochs(1)) {
      (void)epoch;
      fabric.backward(ddp.forward(torch::ones({4, 2})).sum());
      optimizer.step();
    }
    rankwise::print0("trained");
    return 0;
  });
}
