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
  app.add_option("--epochs", cfg.epochs, "number of epochs (at least 1)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--batch-size", cfg.batch_size, "batch size per rank (at least 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
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
    // Fail now, not after an epoch of training, when the checkpoint cannot be written.
    rankwise::check_checkpoint_path(cfg.checkpoint);
    if (cfg.resume && !file_exists(cfg.checkpoint)) {
      rankwise::print0("no checkpoint at {}; starting from epoch 1", cfg.checkpoint);
    } else if (cfg.resume) {
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

    // Metrics: local update() on every rank, one collective compute() per epoch.
    using namespace rankwise::metrics;
    MetricCollection train_metrics;
    auto train_loss = train_metrics.add("loss", std::make_shared<Mean>());
    MetricCollection test_metrics;
    auto test_accuracy = test_metrics.add("accuracy", std::make_shared<Accuracy>(ClassificationOptions(10)));
    auto test_f1 = test_metrics.add(
        "macro_f1", std::make_shared<F1>(ClassificationOptions(10).average(Average::kMacro)));

    for (int epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
      const auto started = std::chrono::steady_clock::now();
      sampler.set_epoch(epoch);
      const auto indices = sampler.indices();
      const auto padding = sampler.is_padding();
      ddp.module()->train();
      train_metrics.reset();
      int64_t processed = 0;
      for (std::size_t begin = 0; begin < indices.size(); begin += cfg.batch_size) {
        const auto end = std::min(indices.size(), begin + static_cast<std::size_t>(cfg.batch_size));
        auto x = take(train.images, indices, begin, end);
        auto y = take(train.labels, indices, begin, end);
        auto per_sample = torch::cross_entropy_loss(ddp.forward(x), y, {}, torch::Reduction::None);
        optimizer.zero_grad();
        per_sample.mean().backward();
        optimizer.step();
        // Padding duplicates train like PyTorch's sampler, but are not counted in the metric.
        train_loss->update(per_sample.detach(),
                           PaddingMask(padding, static_cast<int64_t>(begin),
                                       static_cast<int64_t>(end - begin)));
        processed += static_cast<int64_t>(end - begin);
      }
      ddp.join();  // every rank, after its last batch (uneven inputs would be named here)
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

      // Test metrics: every test sample exactly once across ranks.
      ddp.module()->eval();
      test_metrics.reset();
      {
        torch::NoGradGuard no_grad;
        const auto test_indices = test_sampler.indices();
        for (std::size_t begin = 0; begin < test_indices.size(); begin += 1000) {
          const auto end = std::min(test_indices.size(), begin + 1000);
          auto logits = ddp.module()->forward(take(test.images, test_indices, begin, end));
          auto target = take(test.labels, test_indices, begin, end);
          test_accuracy->update(logits, target);
          test_f1->update(logits, target);
        }
      }
      // Collectives on every rank; only the printing is guarded.
      auto train_values = train_metrics.compute();
      auto test_values = test_metrics.compute();
      auto samples = torch::tensor({static_cast<double>(processed)}, torch::kFloat64);
      auto elapsed = torch::tensor({seconds}, torch::kFloat64);
      rankwise::all_reduce(samples, rankwise::ReduceOp::kSum);
      rankwise::all_reduce(elapsed, rankwise::ReduceOp::kMax);
      rankwise::print0(
          "epoch {}/{} | train loss {:.4f} over {} samples | test accuracy {:.4f}, macro F1 {:.4f} "
          "over {} samples | {:.0f} samples/s on {} ranks",
          epoch + 1, cfg.epochs, train_values.at("loss").item<double>(), train.images.size(0),
          test_values.at("accuracy").item<double>(), test_values.at("macro_f1").item<double>(),
          test.images.size(0), samples.item<double>() / elapsed.item<double>(), group.world_size());

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
