// The main job's one-process original, in plain libtorch: an MLP on
// Fashion-MNIST, one process, no launcher.
//
//   build/examples/fashion_mnist_plain [--epochs 2] [--limit N]
//
// examples/fashion_mnist.cpp is the same program made multi-process with
// rankwise::Fabric; `diff` the two files to see what that takes (README.md
// shows the diff). The metrics are rankwise's, which work in one process as
// torchmetrics does.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "fashion_mnist_dataset.h"
#include "fashion_mnist_mlp.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"

int main(int argc, char** argv) {
  std::string data_dir = rankwise::data::kFashionMnistDir;
  int epochs = 2;
  int64_t batch_size = 64, limit = 0;
  double lr = 0.02, momentum = 0.9;
  uint64_t seed = 0;
  CLI::App app{"MLP training on Fashion-MNIST in one process"};
  app.add_option("--data-dir", data_dir, "directory with the four gzipped IDX files");
  app.add_option("--epochs", epochs, "number of epochs")->check(CLI::Range(1, 1000000));
  app.add_option("--batch-size", batch_size, "batch size per process")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--lr", lr, "learning rate of SGD")->check(CLI::Range(1e-12, 1e6));
  app.add_option("--momentum", momentum, "momentum of SGD")->check(CLI::Range(0.0, 1.0));
  app.add_option("--limit", limit, "use only the first N samples of each split (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "seed of the model initialisation and the shuffling");
  CLI11_PARSE(app, argc, argv);

  torch::manual_seed(seed);
  FashionMnistDataset train(data_dir, /*train=*/true, limit), test(data_dir, /*train=*/false, limit);
  Mlp model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
  auto loader = torch::data::make_data_loader(train, torch::data::samplers::RandomSampler(*train.size()), batch_size);
  auto test_loader = torch::data::make_data_loader(test, torch::data::samplers::SequentialSampler(*test.size()), 1000);

  using namespace rankwise::metrics;
  MetricCollection train_metrics;
  auto train_loss = train_metrics.add("loss", std::make_shared<Mean>());
  MetricCollection test_metrics;
  auto test_accuracy = test_metrics.add("accuracy", std::make_shared<Accuracy>(ClassificationOptions(10)));
  auto test_f1 = test_metrics.add("macro_f1", std::make_shared<F1>(ClassificationOptions(10).average(Average::kMacro)));

  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto started = std::chrono::steady_clock::now();
    model->train();
    train_metrics.reset();
    int64_t processed = 0;
    for (auto& batch : *loader) {
      auto per_sample = torch::cross_entropy_loss(model->forward(batch.data), batch.target, {}, torch::Reduction::None);
      optimizer.zero_grad();
      per_sample.mean().backward();
      optimizer.step();
      train_loss->update(per_sample.detach());
      processed += batch.data.size(0);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    model->eval();
    test_metrics.reset();
    {
      torch::NoGradGuard no_grad;
      for (auto& batch : *test_loader) {
        auto logits = model->forward(batch.data);
        test_accuracy->update(logits, batch.target);
        test_f1->update(logits, batch.target);
      }
    }
    const double loss = train_metrics.compute().at("loss").item<double>();
    auto test_values = test_metrics.compute();
    const double accuracy = test_values.at("accuracy").item<double>(), f1 = test_values.at("macro_f1").item<double>();
    std::cout << fmt::format(
        "epoch {}/{} | train loss {:.4f} over {} samples | test accuracy {:.4f}, macro F1 {:.4f} over {} samples | {:.0f} samples/s\n",
        epoch + 1, epochs, loss, *train.size(), accuracy, f1, *test.size(), processed / seconds) << std::flush;
  }
  return 0;
}
