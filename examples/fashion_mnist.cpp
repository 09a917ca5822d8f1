// The main job: data-parallel training of an MLP on Fashion-MNIST, on
// rankwise::Fabric. It is examples/fashion_mnist_plain.cpp (one process,
// plain libtorch) plus what makes it multi-process (docs/fabric.md shows the diff).
//
//   rankwise-run --nproc-per-node 2 build/examples/fashion_mnist [--epochs 2] [--resume]
//
// Every rank trains on its shard (shuffled per epoch); DDP averages the
// gradients. Each epoch rank 0 prints the global train loss (sums and counts
// reduced, then divided; padding duplicates not counted), the test accuracy
// over the whole test set (each sample once across ranks) and the global
// throughput. The Fabric saves the whole training state at each epoch end and
// every --checkpoint-every steps (rank 0 writes, the others wait); --resume
// continues from the latest checkpoint, even mid-epoch, exactly as if the run
// had never stopped. Rank 0 shows progress (a bar on a terminal, a line now
// and then in a pipe) and writes the metrics log (JSON Lines, by default
// metrics.jsonl in the checkpoint directory, or --metrics-dir DIR) that
// rankwise-report draws (loss, throughput and MFU every --progress-every steps).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include "fashion_mnist_dataset.h"
#include "fashion_mnist_mlp.h"
#include "rankwise/fabric/cli.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/run_main.h"

int train(int argc, char** argv) {
  std::string data_dir = rankwise::data::kFashionMnistDir;
  int epochs = 2;
  int64_t batch_size = 64, limit = 0;
  double lr = 0.02, momentum = 0.9;
  rankwise::FabricOptions options;  // --seed, --checkpoint-dir, --resume, --precision, --progress, ...
  options.checkpoint_dir("fashion_mnist_checkpoints");
  CLI::App app{"Data-parallel MLP training on Fashion-MNIST (run it through rankwise-run)"};
  app.add_option("--data-dir", data_dir, "directory with the four gzipped IDX files");
  app.add_option("--epochs", epochs, "number of epochs")->check(CLI::Range(1, 1000000));
  app.add_option("--batch-size", batch_size, "batch size per process")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--lr", lr, "learning rate of SGD")->check(CLI::Range(1e-12, 1e6));
  app.add_option("--momentum", momentum, "momentum of SGD")->check(CLI::Range(0.0, 1.0));
  app.add_option("--limit", limit, "use only the first N samples of each split (0: all)")->check(CLI::NonNegativeNumber);
  rankwise::fabric::add_fabric_options(app, options);
  RANKWISE_CLI_PARSE(app, argc, argv);  // CLI11_PARSE, with --help printed once
  if (options.metrics_dir().empty()) options.metrics_dir(options.checkpoint_dir());  // metrics.jsonl beside them

  rankwise::Fabric fabric(options);  // process group, device, seed, header, checkpoints, metrics log, progress
  fabric.log_hyperparams({{"epochs", int64_t{epochs}}, {"lr", lr}, {"momentum", momentum}});  // in the metrics log
  FashionMnistDataset train(data_dir, /*train=*/true, limit), test(data_dir, /*train=*/false, limit);
  Mlp model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
  auto ddp = fabric.setup(model, optimizer);  // on fabric.device(), wrapped in DDP, checkpointed
  auto loader = fabric.setup_dataloader(train, batch_size);  // this rank's shard; set_epoch for you
  auto test_loader = fabric.setup_eval_dataloader(test, 1000);  // every test sample once across ranks

  using namespace rankwise::metrics;
  MetricCollection train_metrics;
  auto train_loss = train_metrics.add("loss", std::make_shared<Mean>());
  MetricCollection test_metrics;
  auto test_accuracy = test_metrics.add("accuracy", std::make_shared<Accuracy>(ClassificationOptions(10)));
  auto test_f1 = test_metrics.add("macro_f1", std::make_shared<F1>(ClassificationOptions(10).average(Average::kMacro)));
  fabric.track("train", train_metrics);  // checkpointed; reset at each epoch's start

  for (int64_t epoch : fabric.epochs(epochs)) {  // from a resumed run's epoch; checkpoint at each end
    model->train();
    for (auto& batch : loader) {  // from a resumed run's position; progress and checkpoints on schedule
      auto per_sample = torch::cross_entropy_loss(ddp.forward(batch.data), batch.target, {}, torch::Reduction::None);
      fabric.backward(per_sample.mean());  // with --accumulate N: no_sync() but on every N-th batch
      fabric.optimizer_step();             // optimizer.step(), zero_grad() (every N-th batch)
      train_loss->update(per_sample.detach(), loader.padding_mask());  // padding duplicates not counted
    }

    model->eval();
    test_metrics.reset();
    {
      torch::NoGradGuard no_grad;
      for (auto& batch : test_loader) {
        auto logits = model->forward(batch.data);
        test_accuracy->update(logits, batch.target);
        test_f1->update(logits, batch.target);
      }
    }
    const double loss = train_metrics.compute().at("loss").item<double>();
    auto test_values = test_metrics.compute();
    const double accuracy = test_values.at("accuracy").item<double>(), f1 = test_values.at("macro_f1").item<double>();
    fabric.print0(
        "epoch {}/{} | train loss {:.4f} over {} samples | test accuracy {:.4f}, macro F1 {:.4f} over {} samples | {:.0f} samples/s at world size {}",
        epoch + 1, epochs, loss, *train.size(), accuracy, f1, *test.size(), fabric.throughput().epoch_samples_per_s,
        fabric.world_size());
    fabric.log_epoch({{"train_loss", loss}, {"test_accuracy", accuracy}, {"test_macro_f1", f1}});  // rank 0 writes
  }
  return 0;
}

// run_main reports an uncaught exception (e.g. missing data files) to the
// launcher, which shows it as the root cause.
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
