// The main job: data-parallel training of an MLP on Fashion-MNIST.
//
//   rankwise-run --nproc-per-node 2 build/examples/fashion_mnist [--epochs 2] [--resume]
//
// Every rank trains on its shard (a per-epoch shuffled DistributedSampler);
// gradients are averaged by DistributedDataParallel. Each epoch rank 0 prints
// one line: the global train loss (sums and counts reduced, then divided), the
// test accuracy over the whole test set (each test sample counted exactly once
// across ranks) and the global throughput. A CheckpointManager saves the whole
// training state (model, optimizer, step, epoch, position in the epoch, RNG
// and metric states) at each epoch end and every --checkpoint-every steps;
// rank 0 writes, the others wait. --resume continues from the latest one, even
// mid-epoch, exactly as if the run had never stopped.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <signal.h>

#include <chrono>

#include "fashion_mnist_mlp.h"
#include "rankwise/rankwise.h"

namespace {

struct Config {
  std::string data_dir = rankwise::kFashionMnistDir;
  int epochs = 2;
  int64_t batch_size = 64;
  double lr = 0.02;
  double momentum = 0.9;
  int64_t limit = 0;
  uint64_t seed = 0;
  std::string checkpoint_dir = "fashion_mnist_checkpoints";
  int64_t checkpoint_every = 0;
  int64_t keep_last = 3;
  bool resume = false;
  bool overwrite = false;
  std::string device = "auto";
  int64_t simulate_failure_at_step = 0;
};

constexpr int64_t kMaxCount = int64_t{1} << 40;

torch::Tensor take(const torch::Tensor& t, const std::vector<int64_t>& idx, std::size_t begin,
                   std::size_t end) {
  return t.index_select(0, torch::tensor(std::vector<int64_t>(idx.begin() + begin,
                                                              idx.begin() + end)));
}

// A resume must see the same data; mid-epoch, also the same batches.
void check_resume(const rankwise::TrainingState& state, const Config& cfg, int64_t train_samples,
                  const std::string& path) {
  auto saved = [&](const char* key) { return state.extras.at(key).toInt(); };
  if (saved("train_samples") != train_samples) {
    throw rankwise::ConfigError(fmt::format(
        "{} was written by a run on {} training samples and this run has {} (--limit, "
        "--data-dir): resume with the same data, or start a new run in another --checkpoint-dir",
        path, saved("train_samples"), train_samples));
  }
  if (state.position > 0 && saved("batch_size") != cfg.batch_size) {
    throw rankwise::ConfigError(fmt::format(
        "{} was written in the middle of an epoch with --batch-size {}; this run has {}: resume "
        "mid-epoch with the same --batch-size (or from an epoch-end checkpoint)",
        path, saved("batch_size"), cfg.batch_size));
  }
  if (saved("batch_size") != cfg.batch_size || saved("seed") != static_cast<int64_t>(cfg.seed)) {
    rankwise::print0("note: resuming with --batch-size {} --seed {} (the checkpoint's run used {} "
                     "and {}); the run will not match an uninterrupted one",
                     cfg.batch_size, cfg.seed, saved("batch_size"), saved("seed"));
  }
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
  app.add_option("--lr", cfg.lr, "learning rate of SGD")
      ->check(CLI::Range(1e-12, 1e6))
      ->capture_default_str();
  app.add_option("--momentum", cfg.momentum, "momentum of SGD")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--limit", cfg.limit, "use only the first N training and N test samples (0: all)")
      ->check(CLI::Range(int64_t{0}, kMaxCount));
  app.add_option("--seed", cfg.seed, "seed of the model initialisation and the shuffling")
      ->capture_default_str();
  app.add_option("--checkpoint-dir", cfg.checkpoint_dir,
                 "directory of the checkpoints (numbered files and a `latest` pointer)")
      ->capture_default_str();
  app.add_option("--checkpoint-every", cfg.checkpoint_every,
                 "also save every N optimizer steps (0: only at epoch ends)")
      ->check(CLI::Range(int64_t{0}, kMaxCount));
  app.add_option("--keep-last", cfg.keep_last, "checkpoints to keep")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  app.add_flag("--resume", cfg.resume, "continue from the latest checkpoint in --checkpoint-dir, if any");
  app.add_flag("--overwrite-checkpoints", cfg.overwrite,
               "without --resume, remove the checkpoints of an earlier run in --checkpoint-dir "
               "(otherwise such a directory is refused)");
  app.add_option("--simulate-failure-at-step", cfg.simulate_failure_at_step,
                 "fault injection for resume tests: on the first attempt (restart count 0), rank 1 "
                 "(or rank 0 alone) kills itself with SIGKILL after step N")
      ->check(CLI::Range(int64_t{0}, kMaxCount));
  app.add_option("--device", cfg.device,
                 "auto (this rank's own GPU when every rank has one, else the CPU), cpu, cuda "
                 "(a GPU per rank, else an error) or cuda:N (e.g. cuda:0 for ranks sharing one GPU)")
      ->check([](const std::string& value) -> std::string {
        const bool cuda_n = value.size() > 5 && value.compare(0, 5, "cuda:") == 0 &&
                            value.find_first_not_of("0123456789", 5) == std::string::npos;
        if (value == "auto" || value == "cpu" || value == "cuda" || cuda_n) return "";
        return "'" + value + "' is not a device; use auto, cpu, cuda or cuda:N";
      });
  CLI11_PARSE(app, argc, argv);

  {
    // Before init(): with --device auto and a GPU per rank, init() picks NCCL.
    if (cfg.device.compare(0, 5, "cuda:") == 0) {
      const auto index = std::stoll(cfg.device.substr(5));
      const auto visible = static_cast<long long>(torch::cuda::device_count());
      if (index >= visible) {
        const std::string choices =
            visible == 0 ? std::string("use --device auto or cpu")
                         : fmt::format("use cuda:0 to cuda:{} (CUDA_VISIBLE_DEVICES renumbers them from 0), "
                                       "or --device auto or cpu", visible - 1);
        throw rankwise::ConfigError(fmt::format("--device {}: this process sees {} GPU{}; {}", cfg.device,
                                                visible, visible == 1 ? "" : "s", choices));
      }
    }
    const torch::Device device = cfg.device == "auto" ? rankwise::device()
                                 : cfg.device == "cuda" ? rankwise::device(rankwise::DeviceKind::kCuda)
                                                        : torch::Device(cfg.device);
    auto& group = rankwise::init();
    rankwise::print_header();
    // With auto, the header's device column is the one trained on.
    if (cfg.device != "auto") rankwise::print0("--device {}: training on {}", cfg.device, device.str());

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
    model->to(device);
    torch::optim::SGD optimizer(model->parameters(),
                                torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
    // Collective: rank 0 creates the directory and locks it, so a bad path
    // fails now rather than after an epoch of training.
    rankwise::CheckpointManager checkpoints(
        rankwise::CheckpointManagerOptions(cfg.checkpoint_dir)
            .keep_last(cfg.keep_last)
            .every_n_steps(cfg.checkpoint_every));
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

    // Everything a resumed run needs (the module unwrapped: no "module." prefix).
    rankwise::TrainingState state;
    state.model = ddp.module().get();
    state.optimizer = &optimizer;
    state.metrics["train"] = &train_metrics;
    // What the run is, so that a resume with other data or batches is caught.
    const int64_t train_samples = train.images.size(0);
    auto describe_run = [&] {
      state.extras["train_samples"] = train_samples;
      state.extras["batch_size"] = cfg.batch_size;
      state.extras["seed"] = static_cast<int64_t>(cfg.seed);
    };
    describe_run();
    if (cfg.resume) {
      std::string latest;
      if (auto checkpoint = checkpoints.load_latest(&latest)) {  // every rank, onto the CPU
        rankwise::restore(*checkpoint, state);
        check_resume(state, cfg, train_samples, latest);
        describe_run();
        rankwise::print0("resumed from {} at step {} (epoch {}, {} samples into it on each rank)",
                         latest, state.step, state.epoch + 1, state.position);
        if (state.epoch >= cfg.epochs) {
          const std::string where =
              state.position == 0 ? fmt::format("at the end of epoch {}", state.epoch)
                                  : fmt::format("{} samples into epoch {} on each rank", state.position,
                                                state.epoch + 1);
          rankwise::print0("nothing left to do: the checkpoint is {} and --epochs is {} (the total); "
                           "raise --epochs to train further",
                           where, cfg.epochs);
        }
      } else {
        rankwise::print0("no checkpoint in {}; starting from epoch 1", cfg.checkpoint_dir);
      }
    } else if (!checkpoints.checkpoints().empty()) {
      if (!cfg.overwrite) {
        throw rankwise::ConfigError(
            "--checkpoint-dir " + cfg.checkpoint_dir + " holds checkpoints of an earlier run; pass "
            "--resume to continue it, --overwrite-checkpoints to replace them, or choose another "
            "directory");
      }
      rankwise::print0("removing {} checkpoint(s) of an earlier run from {} (--overwrite-checkpoints)",
                       checkpoints.checkpoints().size(), cfg.checkpoint_dir);
      checkpoints.clear();  // collective
    }
    const bool fail_here = cfg.simulate_failure_at_step > 0 && group.env().restart_count == 0 &&
                           group.rank() == std::min(1, group.world_size() - 1);

    for (int64_t epoch = state.epoch; epoch < cfg.epochs; ++epoch) {
      const auto started = std::chrono::steady_clock::now();
      state.epoch = epoch;
      sampler.set_epoch(epoch);
      const auto indices = sampler.indices();
      const auto padding = sampler.is_padding();
      ddp.module()->train();
      if (state.position == 0) train_metrics.reset();  // a resumed epoch keeps its partial sums
      int64_t processed = 0;
      for (auto begin = static_cast<std::size_t>(state.position); begin < indices.size();
           begin += cfg.batch_size) {
        const auto end = std::min(indices.size(), begin + static_cast<std::size_t>(cfg.batch_size));
        auto x = take(train.images, indices, begin, end).to(device);
        auto y = take(train.labels, indices, begin, end).to(device);
        auto per_sample = torch::cross_entropy_loss(ddp.forward(x), y, {}, torch::Reduction::None);
        optimizer.zero_grad();
        per_sample.mean().backward();
        optimizer.step();
        // Padding duplicates train like PyTorch's sampler, but are not counted in the metric.
        train_loss->update(per_sample.detach(),
                           PaddingMask(padding, static_cast<int64_t>(begin),
                                       static_cast<int64_t>(end - begin)));
        processed += static_cast<int64_t>(end - begin);
        state.step += 1;
        state.position = static_cast<int64_t>(end);
        if (fail_here && state.step == cfg.simulate_failure_at_step) ::raise(SIGKILL);
        if (end < indices.size() && checkpoints.should_save(state.step, /*epoch_end=*/false)) {
          checkpoints.save(rankwise::capture(state), state.step);  // collective
        }
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
          auto logits =
              ddp.module()->forward(take(test.images, test_indices, begin, end).to(device));
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

      state.epoch = epoch + 1;
      state.position = 0;
      if (checkpoints.should_save(state.step, /*epoch_end=*/true)) {
        checkpoints.save(rankwise::capture(state), state.step);  // collective: rank 0 writes, all wait
      }
    }
  }
  return 0;
}

// run_main reports an uncaught exception (e.g. missing data files) to the
// launcher, which shows it as the root cause.
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
