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
// metrics.jsonl in the checkpoint directory) that rankwise-report draws.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "fashion_mnist_dataset.h"
#include "fashion_mnist_mlp.h"
#include "rankwise/fabric/cli.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/classification.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/monitor/metrics_log.h"
#include "rankwise/monitor/progress_bar.h"
#include "rankwise/run_main.h"

int train(int argc, char** argv) {
  std::string data_dir = rankwise::data::kFashionMnistDir;
  int epochs = 2;
  int64_t batch_size = 64, limit = 0;
  double lr = 0.02, momentum = 0.9;
  rankwise::FabricOptions options;  // --seed, --device, --checkpoint-dir, --resume, ...
  options.checkpoint_dir("fashion_mnist_checkpoints");
  std::string metrics_log, progress_style = "auto";  // "" metrics log: metrics.jsonl in the checkpoint directory
  int64_t progress_every = 20;
  double progress_interval = 10;
  CLI::App app{"Data-parallel MLP training on Fashion-MNIST (run it through rankwise-run)"};
  app.add_option("--data-dir", data_dir, "directory with the four gzipped IDX files");
  app.add_option("--epochs", epochs, "number of epochs")->check(CLI::Range(1, 1000000));
  app.add_option("--batch-size", batch_size, "batch size per process")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--lr", lr, "learning rate of SGD")->check(CLI::Range(1e-12, 1e6));
  app.add_option("--momentum", momentum, "momentum of SGD")->check(CLI::Range(0.0, 1.0));
  app.add_option("--limit", limit, "use only the first N samples of each split (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--metrics-log", metrics_log, "JSON Lines metrics log (default: metrics.jsonl in the checkpoint directory)");
  app.add_option("--progress", progress_style, "progress on rank 0: auto (a bar on a terminal, else lines), bar, lines, off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}));
  app.add_option("--progress-every", progress_every, "reduce progress over ranks every N steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--progress-interval", progress_interval, "seconds between progress lines (not on a terminal)")->check(CLI::Range(0.0, 1e6));
  rankwise::fabric::add_fabric_options(app, options);
  RANKWISE_CLI_PARSE(app, argc, argv);  // CLI11_PARSE, with --help printed once

  rankwise::Fabric fabric(options);  // process group, device, seed, header, checkpoint policy
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

  using rankwise::monitor::MetricsLogOptions;
  if (metrics_log.empty() && !options.checkpoint_dir().empty()) metrics_log = options.checkpoint_dir() + "/metrics.jsonl";
  rankwise::monitor::MetricsLog log(  // rank 0 writes; a resumed run appends
      MetricsLogOptions(metrics_log).append(options.resume() == rankwise::Resume::kLatest),
      {{"program", std::string("fashion_mnist")}, {"epochs", int64_t{epochs}}, {"batch_size_per_rank", batch_size},
       {"lr", lr}, {"momentum", momentum}, {"train_samples", static_cast<int64_t>(*train.size())},
       {"test_samples", static_cast<int64_t>(*test.size())}, {"seed", static_cast<int64_t>(options.seed())},
       {"device", fabric.device().str()}, {"checkpoint_dir", options.checkpoint_dir()}});
  rankwise::monitor::ProgressBar progress(rankwise::monitor::ProgressBarOptions()  // rank 0 shows it
                                           .style(rankwise::monitor::parse_progress_style(progress_style))
                                           .every_n_steps(progress_every)
                                           .line_interval(std::chrono::milliseconds(std::llround(progress_interval * 1000))));
  auto log_step = [&](int64_t step, int64_t epoch) {  // after a reduction of the progress (every rank)
    log.log_step(step, epoch + 1, {{"loss", progress.loss()}}, progress.samples_per_second(),
                 progress.rank_stats());
  };

  for (int64_t epoch : fabric.epochs(epochs)) {  // from a resumed run's epoch; checkpoint at each end
    const auto started = std::chrono::steady_clock::now();
    model->train();
    int64_t processed = 0;
    const auto pass = loader.next_pass();  // a resumed epoch: its batches done and in all
    progress.start_epoch(epoch + 1, epochs, pass.total, pass.done);
    for (auto& batch : loader) {  // from a resumed run's position; checkpoints on schedule
      auto per_sample = torch::cross_entropy_loss(ddp.forward(batch.data), batch.target, {}, torch::Reduction::None);
      fabric.backward(per_sample.mean());  // with --accumulate N: no_sync() but on every N-th batch
      fabric.optimizer_step();             // optimizer.step(), zero_grad() (every N-th batch)
      train_loss->update(per_sample.detach(), loader.padding_mask());
      processed += loader.num_real_samples();  // padding duplicates not counted
      // Collective every --progress-every steps; fabric.step() counts this step once the loader moves on.
      if (progress.update(loader.num_real_samples(), per_sample.detach().mean())) log_step(fabric.step() + 1, epoch);
    }
    if (progress.end_epoch()) log_step(fabric.step(), epoch);  // collective
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

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
    auto train_values = train_metrics.compute();
    auto test_values = test_metrics.compute();
    const double samples_per_second = fabric.all_reduce(processed) / fabric.all_reduce(seconds, rankwise::dist::ReduceOp::kMax);
    fabric.print0(
        "epoch {}/{} | train loss {:.4f} over {} samples | test accuracy {:.4f}, macro F1 {:.4f} over {} samples | {:.0f} samples/s at world size {}",
        epoch + 1, epochs, train_values.at("loss").item<double>(), *train.size(), test_values.at("accuracy").item<double>(),
        test_values.at("macro_f1").item<double>(), *test.size(), samples_per_second, fabric.world_size());
    log.log_epoch(epoch + 1, fabric.step(),
                  {{"train_loss", train_values.at("loss").item<double>()},
                   {"test_accuracy", test_values.at("accuracy").item<double>()},
                   {"test_macro_f1", test_values.at("macro_f1").item<double>()}},
                  samples_per_second);
  }
  return 0;
}

// run_main reports an uncaught exception (e.g. missing data files) to the
// launcher, which shows it as the root cause.
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
