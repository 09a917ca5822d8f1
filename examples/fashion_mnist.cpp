// The main job: data-parallel training of an MLP on Fashion-MNIST.
//
//   rankwise-run --nproc-per-node 2 build/examples/fashion_mnist [--epochs 2] [--resume]
//
// Every rank trains on its shard (a per-epoch shuffled DistributedSampler);
// gradients are averaged by DistributedDataParallel. Each epoch rank 0 prints
// one line: the global train loss (sums and counts reduced, then divided), the
// test accuracy over the whole test set (each test sample counted exactly once
// across ranks) and the global throughput. Rank 0 saves a checkpoint each
// epoch (atomically; the others wait) and --resume continues from it.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <sys/stat.h>

#include "rankwise/rankwise.h"

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

struct Config {
  std::string data_dir = rankwise::kFashionMnistDir;
  int epochs = 2;
  int64_t batch_size = 64;
  double lr = 0.02;
  double momentum = 0.9;
  int64_t limit = 0;
  uint64_t seed = 0;
  std::string checkpoint = "fashion_mnist.ckpt";
  bool resume = false;
};

torch::Tensor take(const torch::Tensor& t, const std::vector<int64_t>& idx, std::size_t begin,
                   std::size_t end) {
  return t.index_select(0, torch::tensor(std::vector<int64_t>(idx.begin() + begin,
                                                              idx.begin() + end)));
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

}  // namespace

int train(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Data-parallel MLP training on Fashion-MNIST (run it through rankwise-run)"};
  app.add_option("--data-dir", cfg.data_dir, "directory with the four gzipped IDX files");
  app.add_option("--epochs", cfg.epochs, "number of epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", cfg.batch_size, "batch size per rank")->check(CLI::PositiveNumber);
  app.add_option("--lr", cfg.lr, "learning rate of SGD")->check(CLI::PositiveNumber);
  app.add_option("--momentum", cfg.momentum, "momentum of SGD")->check(CLI::Range(0.0, 1.0));
  app.add_option("--limit", cfg.limit, "use only the first N training and N test samples (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", cfg.seed, "seed of the model initialisation and the shuffling");
  app.add_option("--checkpoint", cfg.checkpoint, "checkpoint path, written by rank 0 each epoch");
  app.add_flag("--resume", cfg.resume, "continue from --checkpoint if it exists");
  CLI11_PARSE(app, argc, argv);

  {
    auto& group = rankwise::init();
    rankwise::print_header();

    auto train = rankwise::load_fashion_mnist(cfg.data_dir, /*train=*/true);
    auto test = rankwise::load_fashion_mnist(cfg.data_dir, /*train=*/false);
    if (cfg.limit > 0) {
      train = {train.images.narrow(0, 0, std::min(cfg.limit, train.images.size(0))),
               train.labels.narrow(0, 0, std::min(cfg.limit, train.labels.size(0)))};
      test = {test.images.narrow(0, 0, std::min(cfg.limit, test.images.size(0))),
              test.labels.narrow(0, 0, std::min(cfg.limit, test.labels.size(0)))};
    }

    torch::manual_seed(cfg.seed);
    Mlp model;
    torch::optim::SGD optimizer(model->parameters(),
                                torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
    int start_epoch = 0;
    if (cfg.resume && file_exists(cfg.checkpoint)) {
      auto ckpt = rankwise::load(cfg.checkpoint);  // every rank, onto the CPU, before wrapping
      rankwise::load_state_dict(*model, rankwise::to_state_dict(ckpt.at("model")));
      rankwise::load_optimizer_state(optimizer, ckpt.at("optimizer").toTensor());
      start_epoch = static_cast<int>(ckpt.at("epoch").toInt());
      rankwise::print0("resumed from {} at epoch {}", cfg.checkpoint, start_epoch);
    }
    rankwise::DistributedDataParallel ddp(model);

    rankwise::DistributedSampler sampler(train.images.size(0),
                                         rankwise::DistributedSamplerOptions().seed(cfg.seed));
    rankwise::DistributedSampler test_sampler(
        test.images.size(0), rankwise::DistributedSamplerOptions().shuffle(false).pad(false));

    for (int epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
      const auto started = std::chrono::steady_clock::now();
      sampler.set_epoch(epoch);
      const auto indices = sampler.indices();
      const auto padding = sampler.is_padding();
      ddp.module()->train();
      // [loss sum over real samples, real sample count, samples processed]
      auto totals = torch::zeros({3}, torch::kFloat64);
      for (std::size_t begin = 0; begin < indices.size(); begin += cfg.batch_size) {
        const auto end = std::min(indices.size(), begin + static_cast<std::size_t>(cfg.batch_size));
        auto x = take(train.images, indices, begin, end);
        auto y = take(train.labels, indices, begin, end);
        auto per_sample = torch::cross_entropy_loss(
            ddp.forward(x), y, {}, torch::Reduction::None, /*ignore_index=*/-100);
        auto loss = per_sample.mean();
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
        // Padding duplicates train like PyTorch's sampler, but are not counted in the metric.
        auto mask = torch::ones({static_cast<int64_t>(end - begin)}, torch::kBool);
        for (std::size_t i = begin; i < end; ++i) {
          if (padding[i]) mask[static_cast<int64_t>(i - begin)] = false;
        }
        totals[0] += per_sample.detach().masked_select(mask).sum().to(torch::kFloat64);
        totals[1] += mask.sum().to(torch::kFloat64);
        totals[2] += static_cast<double>(end - begin);
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

      // Test accuracy: every test sample exactly once across ranks.
      ddp.module()->eval();
      auto correct = torch::zeros({2}, torch::kFloat64);
      {
        torch::NoGradGuard no_grad;
        const auto test_indices = test_sampler.indices();
        for (std::size_t begin = 0; begin < test_indices.size(); begin += 1000) {
          const auto end = std::min(test_indices.size(), begin + 1000);
          auto prediction = ddp.module()->forward(take(test.images, test_indices, begin, end)).argmax(1);
          correct[0] += prediction.eq(take(test.labels, test_indices, begin, end)).sum().to(torch::kFloat64);
          correct[1] += static_cast<double>(end - begin);
        }
      }
      // Collectives on every rank; only the printing is guarded.
      auto sums = torch::cat({totals, correct});
      rankwise::all_reduce(sums, rankwise::ReduceOp::kSum);
      auto elapsed = torch::tensor({seconds}, torch::kFloat64);
      rankwise::all_reduce(elapsed, rankwise::ReduceOp::kMax);
      const double train_loss = sums[0].item<double>() / sums[1].item<double>();
      const double accuracy = sums[3].item<double>() / sums[4].item<double>();
      const double throughput = sums[2].item<double>() / elapsed.item<double>();
      rankwise::print0(
          "epoch {}/{} | train loss {:.4f} over {} samples | test accuracy {:.4f} over {} samples | "
          "{:.0f} samples/s on {} ranks",
          epoch + 1, cfg.epochs, train_loss, static_cast<int64_t>(sums[1].item<double>()), accuracy,
          static_cast<int64_t>(sums[4].item<double>()), throughput, group.world_size());

      rankwise::Checkpoint state;
      state.insert("model", rankwise::state_dict(*ddp.module()));
      state.insert("optimizer", rankwise::optimizer_state(optimizer));
      state.insert("epoch", static_cast<int64_t>(epoch + 1));
      rankwise::save(cfg.checkpoint, state);  // collective: rank 0 writes, all wait
    }
  }
  return 0;
}

// run_main reports an uncaught exception (e.g. missing data files) to the
// launcher, which shows it as the root cause.
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
