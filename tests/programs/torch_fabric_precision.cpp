// torch_fabric_precision PRECISION DIR [KILL_AT_STEP]: a small MLP trained
// through a Fabric with FabricOptions::precision(PRECISION) for 2 epochs
// on a synthetic 4-class task (8 features, pseudo-random by index; the label
// is the argmax of a fixed linear teacher), Adam, 32 samples per rank and
// batch, 4096 training samples; prints "accuracy A" on 2048 held-out
// samples (an evaluation loader, every sample once across ranks).
// Checkpoints every 10 steps and at epoch ends in DIR/ckpt, resumed from the
// latest (Resume::kLatest). With KILL_AT_STEP the last rank SIGKILLs itself
// at the batch after step KILL_AT_STEP, unless DIR/killed exists (it
// creates it first). At the end every rank joins in writing DIR/final.pt
// (the captured training state; with 16-mixed, extras["grad_scaler"] holds
// the GradScaler's state).
#include <torch/data/datasets/base.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "rankwise/amp/grad_scaler.h"
#include "rankwise/rankwise.h"

namespace {

constexpr int64_t kTrain = 4096, kTest = 2048, kFeatures = 8, kClasses = 4, kBatch = 32;

// Samples [offset, offset + n): x_ij = sin(0.7 (i + 1)(j + 1) + j), label
// argmax_k sum_j x_ij cos(3j + 5k + 1).
class Task : public torch::data::datasets::BatchDataset<Task, torch::data::Example<>> {
 public:
  Task(int64_t offset, int64_t n) : offset_(offset), n_(n) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto i = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end())).to(torch::kFloat64) + offset_;
    auto j = torch::arange(kFeatures, torch::kFloat64);
    auto x = torch::sin(0.7 * (i.unsqueeze(1) + 1) * (j + 1) + j);
    auto k = torch::arange(kClasses, torch::kFloat64);
    auto teacher = torch::cos(3 * j.unsqueeze(1) + 5 * k + 1);
    return {x.to(torch::kFloat32), x.matmul(teacher).argmax(1)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t offset_, n_;
};

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(kFeatures, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

int train(int argc, char** argv) {
  if (argc < 3) throw rankwise::ConfigError("usage: torch_fabric_precision PRECISION DIR [KILL_AT_STEP]");
  const std::string precision = argv[1], dir = argv[2];
  const int64_t kill_at = argc > 3 ? std::stoll(argv[3]) : 0;
  rankwise::Fabric fabric(rankwise::FabricOptions()
                              .device("cpu")
                              .seed(3)
                              .print_header(false)
                              .precision(precision)
                              .checkpoint_dir(dir + "/ckpt")
                              .checkpoint_every(10)
                              .keep_last(2)
                              .resume(rankwise::Resume::kLatest));
  auto model = std::make_shared<Mlp>();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(3e-3));
  auto ddp = fabric.setup(model, optimizer);
  auto loader = fabric.setup_dataloader(Task(0, kTrain), kBatch);
  auto test = fabric.setup_eval_dataloader(Task(kTrain, kTest), 256);
  const bool killer = kill_at > 0 && fabric.rank() == fabric.world_size() - 1;
  for (int64_t epoch : fabric.epochs(2)) {
    (void)epoch;
    for (auto& b : loader) {
      if (killer && fabric.step() == kill_at && !exists(dir + "/killed")) {
        std::ofstream(dir + "/killed") << "killed after step " << kill_at << "\n";
        ::raise(SIGKILL);
      }
      fabric.backward(torch::nn::functional::cross_entropy(ddp.forward(b.data), b.target));
      fabric.optimizer_step();
    }
  }
  double correct = 0;
  for (auto& b : test) {
    torch::NoGradGuard no_grad;
    correct += ddp.forward(b.data).argmax(1).eq(b.target).sum().item<double>();
  }
  rankwise::print0("accuracy {:.4f}", fabric.all_reduce(correct) / kTest);
  rankwise::checkpoint::TrainingState state;
  state.model = model.get();
  state.optimizer = &optimizer;
  state.step = fabric.step();
  state.epoch = fabric.epoch();
  if (auto* scaler = fabric.grad_scaler()) state.extras["grad_scaler"] = scaler->state_dict();
  rankwise::checkpoint::save(dir + "/final.pt", rankwise::checkpoint::capture(state));
  rankwise::print0("done at step {}", fabric.step());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
