// rankwise-test-nproc: 1 2 3
//
// rankwise::Fabric: loaders that shard and reshuffle for you, every sample
// once in evaluation, resume by policy (bitwise equal to a run that never
// stopped), refusal of another run's checkpoints, and collectives that only
// some ranks reach failing on every rank instead of hanging.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <thread>

#include "rankwise/error.h"
#include "rankwise/fabric.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/collection.h"

namespace fs = std::filesystem;

namespace {

// Sample i is the row [i, i / 10] with label i % 3 (float32 [B, 2], int64 [B]).
class Numbers : public torch::data::datasets::BatchDataset<Numbers, torch::data::Example<>> {
 public:
  explicit Numbers(int64_t n) : n_(n) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto i = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
    auto x = torch::stack({i.to(torch::kFloat32), i.to(torch::kFloat32) / 10}, 1);
    return {x, i.remainder(3)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(2, 8));
    drop = register_module("drop", torch::nn::Dropout(0.3));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(fc1(x / 10)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

rankwise::FabricOptions quiet() {
  return rankwise::FabricOptions().print_header(false).timeout(std::chrono::seconds(60));
}

// A directory every rank of this run shares (the store's port is unique per
// run; a single process without launcher gets its own).
fs::path shared_dir(const std::string& name) {
  const auto port = rankwise::get_env("MASTER_PORT").value_or("solo" + std::to_string(::getpid()));
  return fs::temp_directory_path() / ("rankwise_mp_fabric_" + port + "_" + name);
}

// This rank's non-padding sample ids of one pass, in order.
std::vector<int64_t> ids_of_pass(rankwise::fabric::FabricLoader<Numbers>& loader) {
  std::vector<int64_t> ids;
  for (auto& batch : loader) {
    const auto mask = loader.padding_mask();
    const auto keep = mask.empty() ? torch::ones({batch.data.size(0)}, torch::kBool)
                                   : mask.keep(batch.data.size(0), "test");
    for (int64_t k = 0; k < batch.data.size(0); ++k) {
      if (keep[k].item<bool>()) ids.push_back(batch.data[k][0].item<int64_t>());
    }
  }
  return ids;
}

// Every rank's ids, concatenated in rank order (variable lengths: padded).
std::vector<int64_t> gather_ids(rankwise::Fabric& fabric, const std::vector<int64_t>& mine) {
  auto length = torch::tensor({static_cast<int64_t>(mine.size())});
  auto lengths = fabric.all_gather(length);
  int64_t longest = 0;
  for (auto& l : lengths) longest = std::max(longest, l.item<int64_t>());
  auto padded = torch::full({longest}, -1, torch::kInt64);
  for (std::size_t k = 0; k < mine.size(); ++k) padded[static_cast<int64_t>(k)] = mine[k];
  std::vector<int64_t> all;
  auto gathered = fabric.all_gather(padded);
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    for (int64_t k = 0; k < lengths[r].item<int64_t>(); ++k) all.push_back(gathered[r][k].item<int64_t>());
  }
  return all;
}

std::vector<torch::Tensor> parameters_of(Net& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

// Trains Net on Numbers(23) for 3 epochs with Adam, batch 2 per rank,
// dropout on per-rank seeds; throws std::runtime_error("crash") after
// `crash_after` steps (0: never). Returns the final parameters.
std::vector<torch::Tensor> train(const fs::path& dir, rankwise::Resume resume, int64_t crash_after,
                                 double* loss_out = nullptr, uint64_t seed = 7) {
  rankwise::Fabric fabric(quiet()
                              .seed(seed)
                              .seed_per_rank(true)
                              .checkpoint_dir(dir.string())
                              .checkpoint_every(3)
                              .resume(resume));
  auto net = std::make_shared<Net>();
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(0.01));
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(23), 2);
  rankwise::metrics::MetricCollection metrics;
  auto loss_mean = metrics.add("loss", std::make_shared<rankwise::metrics::Mean>());
  fabric.track("train", metrics);
  for (int64_t epoch : fabric.epochs(3)) {
    (void)epoch;
    for (auto& batch : loader) {
      optimizer.zero_grad();
      auto per_sample = torch::cross_entropy_loss(ddp.forward(batch.data), batch.target, {},
                                                  torch::Reduction::None);
      fabric.backward(per_sample.mean());
      optimizer.step();
      loss_mean->update(per_sample.detach(), loader.padding_mask());
      if (crash_after > 0 && fabric.step() == crash_after) throw std::runtime_error("crash");
    }
    const double loss = metrics.compute().at("loss").item<double>();
    if (loss_out != nullptr) *loss_out = loss;
  }
  return parameters_of(*net);
}

}  // namespace

TEST(Fabric, TrainingLoaderShardsLikeDistributedSamplerAndReshufflesEachEpoch) {
  rankwise::Fabric fabric(quiet().seed(3));
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(10), 3);
  std::vector<std::vector<int64_t>> per_epoch;
  for (int64_t epoch : fabric.epochs(2)) {
    std::vector<int64_t> seen;  // every index, padding included
    for (auto& batch : loader) {
      for (int64_t k = 0; k < batch.data.size(0); ++k) seen.push_back(batch.data[k][0].item<int64_t>());
      optimizer.zero_grad();
      fabric.backward(ddp.forward(batch.data).sum());
      optimizer.step();
    }
    rankwise::data::DistributedSampler reference(10, rankwise::data::DistributedSamplerOptions().seed(3));
    reference.set_epoch(epoch);
    EXPECT_EQ(seen, reference.indices()) << "epoch " << epoch;
    per_epoch.push_back(seen);
    EXPECT_EQ(fabric.epoch(), epoch + 1);  // the loader's pass ended the epoch
  }
  EXPECT_NE(per_epoch[0], per_epoch[1]);  // set_epoch happened without being asked for
  EXPECT_EQ(fabric.step(), 2 * loader.size());
}

TEST(Fabric, EveryNonPaddingSampleOnceAcrossRanks) {
  rankwise::Fabric fabric(quiet());
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(11), 4);
  auto all = gather_ids(fabric, ids_of_pass(loader));
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(11);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);

  // num_real_samples() counts what a throughput should: every sample once
  // per epoch summed over ranks (12 indices at 2 and 3 ranks, 1 a duplicate).
  int64_t counted = 0, padded = 0;
  for (auto& batch : loader) {
    counted += loader.num_real_samples();
    padded += batch.data.size(0);
  }
  EXPECT_EQ(fabric.all_reduce(static_cast<double>(counted)), 11.0);
  EXPECT_EQ(fabric.all_reduce(static_cast<double>(padded)), fabric.world_size() == 1 ? 11.0 : 12.0);

  auto eval = fabric.setup_eval_dataloader(Numbers(11), 4);
  auto evaluated = gather_ids(fabric, ids_of_pass(eval));
  std::sort(evaluated.begin(), evaluated.end());
  EXPECT_EQ(evaluated, expected);
}

TEST(Fabric, ResumedMidEpochEndsBitwiseEqualToAnUninterruptedRun) {
  const auto a = shared_dir("a"), b = shared_dir("b");
  if (rankwise::dist::rank() == 0) {
    fs::remove_all(a);
    fs::remove_all(b);
  }
  double loss_a = 0, loss_b = 0;
  const auto expected = train(a, rankwise::Resume::kNew, 0, &loss_a);
  // Crash in the 11th batch; the latest checkpoint is then step 9's, mid-epoch
  // at every world size (12, 6 and 4 batches per epoch at 1, 2 and 3 ranks).
  // Resume from it with fresh objects.
  EXPECT_THROW(train(b, rankwise::Resume::kNew, 10), std::runtime_error);
  std::ifstream latest(b / "latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "checkpoint-0000000009.pt");
  // Another seed would deal the rest of the epoch in another order: refused.
  try {
    train(b, rankwise::Resume::kLatest, 0, nullptr, /*seed=*/8);
    ADD_FAILURE() << "a mid-epoch resume with another seed was accepted";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("in the middle of an epoch with seed 7; this run has seed "
                                         "8, which would deal the rest of that epoch in another order"),
              std::string::npos)
        << e.what();
  }
  const auto resumed = train(b, rankwise::Resume::kLatest, 0, &loss_b);
  ASSERT_EQ(expected.size(), resumed.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(expected[i], resumed[i])) << "parameter " << i;
  }
  EXPECT_EQ(loss_a, loss_b);  // the last epoch's loss, partial sums included
  rankwise::dist::barrier();
  if (rankwise::dist::rank() == 0) {
    fs::remove_all(a);
    fs::remove_all(b);
  }
}

TEST(Fabric, RefusesCheckpointsOfAnotherRun) {
  const auto dir = shared_dir("refuse");
  if (rankwise::dist::rank() == 0) fs::remove_all(dir);
  train(dir, rankwise::Resume::kNew, 0);
  // A new run in the same directory: refused on every rank, naming the way out.
  try {
    rankwise::Fabric fabric(quiet().checkpoint_dir(dir.string()));
    ADD_FAILURE() << "a directory with checkpoints was accepted";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds checkpoints of an earlier run; resume it"),
              std::string::npos)
        << e.what();
  }
  // Resumed with other data: refused when training starts.
  {
    rankwise::Fabric fabric(quiet().checkpoint_dir(dir.string()).resume(rankwise::Resume::kLatest));
    auto net = std::make_shared<Net>();
    torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(0.01));
    auto ddp = fabric.setup(net, optimizer);
    auto loader = fabric.setup_dataloader(Numbers(24), 2);
    rankwise::metrics::MetricCollection metrics;
    metrics.add("loss", std::make_shared<rankwise::metrics::Mean>());
    fabric.track("train", metrics);
    try {
      fabric.epochs(4).begin();
      ADD_FAILURE() << "a checkpoint of 23 samples resumed on 24";
    } catch (const rankwise::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("was written by a run on 23 training samples and this "
                                           "run's training loader has 24"),
                std::string::npos)
          << e.what();
    }
  }
  // Overwrite: the earlier checkpoints are gone, a new run starts at epoch 0.
  {
    rankwise::Fabric fabric(
        quiet().checkpoint_dir(dir.string()).resume(rankwise::Resume::kOverwrite));
    EXPECT_EQ(fabric.epoch(), 0);
    rankwise::dist::barrier();
    int files = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      files += entry.path().filename().string().rfind("checkpoint-", 0) == 0 ? 1 : 0;
    }
    EXPECT_EQ(files, 0);
  }
  rankwise::dist::barrier();
  if (rankwise::dist::rank() == 0) fs::remove_all(dir);
}

TEST(Fabric, MisuseIsAClearError) {
  rankwise::Fabric fabric(quiet());
  EXPECT_THROW(fabric.backward(torch::ones({1}, torch::requires_grad()).sum()), rankwise::Error);
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto ddp = fabric.setup(net, optimizer);
  EXPECT_THROW(fabric.setup(net, optimizer), rankwise::ConfigError);
  EXPECT_THROW(fabric.setup_dataloader(Numbers(4), 0), rankwise::ConfigError);
  auto loader = fabric.setup_dataloader(Numbers(4), 1);
  EXPECT_THROW(fabric.setup_dataloader(Numbers(4), 1), rankwise::ConfigError);
  EXPECT_THROW(fabric.save(), rankwise::ConfigError);  // no checkpoint directory
  EXPECT_THROW(rankwise::Fabric(quiet().device("gpu")), rankwise::ConfigError);
  EXPECT_THROW(rankwise::Fabric(quiet().device("cuda:7")), rankwise::ConfigError);
}

// What new users' programs got wrong, each refused where it happens.
TEST(Fabric, SaveBeforeSetupAndTrackAfterTheStartAreErrors) {
  const auto dir = shared_dir("early_save");
  if (rankwise::dist::rank() == 0) fs::remove_all(dir);
  {
    rankwise::Fabric fabric(quiet().checkpoint_dir(dir.string()));
    try {
      fabric.save();
      ADD_FAILURE() << "a checkpoint without a model was written";
    } catch (const rankwise::Error& e) {
      EXPECT_NE(std::string(e.what()).find("Fabric::save before Fabric::setup: the checkpoint would "
                                           "hold no model or optimizer"),
                std::string::npos)
          << e.what();
    }
    auto net = std::make_shared<Net>();
    torch::optim::SGD optimizer(net->parameters(), 0.1);
    auto ddp = fabric.setup(net, optimizer);
    torch::optim::StepLR scheduler(optimizer, 1, 0.5);
    fabric.track(scheduler);  // before training: fine
    auto loader = fabric.setup_dataloader(Numbers(8), 2);
    fabric.epochs(1).begin();  // training starts (a resume would restore now)
    try {
      fabric.track(scheduler);
      ADD_FAILURE() << "track() after the start was accepted";
    } catch (const rankwise::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("Fabric::track(scheduler) after training started"),
                std::string::npos)
          << e.what();
    }
    rankwise::metrics::MetricCollection metrics;
    EXPECT_THROW(fabric.track("train", metrics), rankwise::ConfigError);
  }
  rankwise::dist::barrier();
  EXPECT_FALSE(fs::exists(dir / "latest"));
  if (rankwise::dist::rank() == 0) fs::remove_all(dir);
}

TEST(Fabric, AnOptimizerThatDoesNotHoldTheSetUpModelOnEveryRankIsRefused) {
  auto refusal = [](auto make_params) -> std::string {
    rankwise::Fabric fabric(quiet());
    auto net = std::make_shared<Net>();
    torch::optim::SGD optimizer(make_params(*net, fabric), 0.1);
    try {
      fabric.setup(net, optimizer);
    } catch (const rankwise::ConfigError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  // A tensor that is not the model's (e.g. a parameter of another module).
  const std::string stray = refusal([](Net& net, rankwise::Fabric&) {
    auto params = net.parameters();
    params.push_back(torch::zeros({3}, torch::requires_grad()));
    return params;
  });
  EXPECT_NE(stray.find("rank 0: 4 of the model's 4 parameters and 1 tensor(s) that are not the model's"),
            std::string::npos)
      << stray;
  // Each rank's share, as a ZeroRedundancyOptimizer's local_optimizer() holds.
  const std::string share = refusal([](Net& net, rankwise::Fabric& fabric) {
    std::vector<torch::Tensor> mine;
    const auto all = net.parameters();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (static_cast<int>(i) % fabric.world_size() == fabric.rank()) mine.push_back(all[i]);
    }
    return mine;
  });
  if (rankwise::dist::world_size() == 1) {
    EXPECT_EQ(share, "(accepted)");
    return;
  }
  EXPECT_NE(share.find("the optimizer must hold the same parameters of the set-up model on every "
                       "rank, or the replicas drift apart (rank 0: 2 of the model's 4 parameters; "
                       "rank 1: "),
            std::string::npos)
      << share;
  EXPECT_NE(share.find("use --strategy zero1"), std::string::npos) << share;
}

TEST(Fabric, ReplicasThatDivergeEndTheRunWithAnErrorNamingTheParameter) {
  rankwise::Fabric fabric(quiet());
  if (fabric.world_size() == 1) GTEST_SKIP() << "needs two ranks";
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(8), 2);
  try {
    for (int64_t epoch : fabric.epochs(1)) {
      (void)epoch;
      for (auto& batch : loader) {
        optimizer.zero_grad();
        fabric.backward(torch::cross_entropy_loss(ddp.forward(batch.data), batch.target));
        optimizer.step();
        if (fabric.rank() == 1) {  // a step that only one rank takes
          torch::NoGradGuard no_grad;
          net->fc2->bias.add_(1);
        }
      }
    }
    ADD_FAILURE() << "the run ended with different models on its ranks";
  } catch (const rankwise::Error& e) {
    EXPECT_NE(std::string(e.what()).find("replicas diverged: fc2.bias (ranks 1 differ from rank 0)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Fabric, CollectiveInsideARankZeroBranchFailsOnEveryRank) {
  rankwise::Fabric fabric(quiet());
  if (fabric.world_size() == 1) GTEST_SKIP() << "needs two ranks";
  auto value = torch::ones({1});
  auto ids = torch::arange(3);
  const int reduce_line = __LINE__ + 4;  // all_gather is 2 lines below it
  try {
    if (fabric.is_global_zero()) {
      fabric.print0("rank 0 alone prints, then wrongly reduces");
      fabric.all_reduce(value);
    }
    fabric.all_gather(ids);  // every rank
    ADD_FAILURE() << "out-of-step collectives were not detected";
  } catch (const rankwise::CollectiveMismatchError& e) {
    const std::string others = fabric.world_size() == 2 ? "rank 1" : "ranks 1, 2";
    // Both calls with their sequence number (the same on every rank) and call site.
    const std::regex expected("rank 0 called all_reduce #(\\d+) \\(Float \\[1\\], sum\\) at "
                              "test_fabric.cpp:" + std::to_string(reduce_line) + "; " + others +
                              " called all_gather #\\1 \\(Long \\[3\\]\\) at test_fabric.cpp:" +
                              std::to_string(reduce_line + 2));
    EXPECT_TRUE(std::regex_search(std::string(e.what()), expected)) << e.what();
  }
  // Every rank threw at the same check: the group is still usable.
  EXPECT_EQ(fabric.all_reduce(1.0), fabric.world_size());
}

TEST(Fabric, OptionsFromTheCommandLine) {
  std::vector<std::string> args;  // the last parse's command line
  std::vector<char*> argv;
  int argc = 0;
  auto parse = [&](std::vector<std::string> line) {
    args = std::move(line);
    argv.clear();
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    argc = static_cast<int>(args.size());
    return rankwise::Fabric(argc, argv.data(), quiet());
  };
  {
    // The program's own flags (--epochs 3) are left to it, and only they.
    auto fabric = parse({"prog", "--seed", "11", "--epochs", "3", "--keep-last", "2", "--device", "cpu"});
    EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + argc),
              (std::vector<std::string>{"prog", "--epochs", "3"}));
    EXPECT_EQ(argv[argc], nullptr);
    EXPECT_EQ(fabric.options().seed(), 11u);
    EXPECT_EQ(fabric.options().keep_last(), 2);
    EXPECT_EQ(fabric.device(), torch::Device(torch::kCPU));
    EXPECT_FALSE(fabric.options().print_header());  // from the defaults
  }
  auto message = [&](std::vector<std::string> args) -> std::string {
    try {
      parse(std::move(args));
    } catch (const rankwise::ConfigError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(message({"prog", "--device", "gpu"}).find("'gpu' is not a device; use auto, cpu, cuda or cuda:N"),
            std::string::npos);
  EXPECT_NE(message({"prog", "--resume", "--overwrite-checkpoints"}).find("--resume excludes --overwrite-checkpoints"),
            std::string::npos);
  EXPECT_NE(message({"prog", "--keep-last", "0"}).find("--keep-last"), std::string::npos);
  // Misspelt flags are not left to the program (which may parse none): refused, naming the flag meant.
  for (const auto& [typo, meant] : std::vector<std::pair<std::string, std::string>>{
           {"--checkpoint-evry", "--checkpoint-every"}, {"--acumulate", "--accumulate"},
           {"--resum", "--resume"}, {"--sede", "--seed"}, {"--keep_lsat", "--keep_last"}}) {
    const std::string why = message({"prog", typo, "5"});
    EXPECT_NE(why.find(typo + " is not a flag of rankwise::Fabric; did you mean " + meant + "?"),
              std::string::npos)
        << why;
  }
  EXPECT_NE(message({"prog", "--precison=bf16-mixed"}).find("--precison is not a flag of rankwise::Fabric; did you mean --precision?"),
            std::string::npos);
  // An fsdp flag under another strategy would change nothing: refused, by name.
  EXPECT_NE(message({"prog", "--fsdp-reshard-after-forward", "false"})
                .find("--fsdp-reshard-after-forward applies to --strategy fsdp, and this run's strategy is ddp"),
            std::string::npos)
      << message({"prog", "--fsdp-reshard-after-forward", "false"});
  EXPECT_NE(message({"prog", "--strategy", "zero1", "--fsdp-min-unit-params", "1000"})
                .find("--fsdp-min-unit-params applies to --strategy fsdp, and this run's strategy is zero1"),
            std::string::npos);
  {
    auto fabric = parse({"prog", "--strategy", "fsdp", "--fsdp-reshard-after-forward", "false"});
    EXPECT_FALSE(fabric.options().fsdp().reshard_after_forward());
  }
  // Not a number says so, not "not in range".
  EXPECT_NE(message({"prog", "--accumulate", "abc"}).find("'abc' is not an integer in [1, 1048576]"),
            std::string::npos)
      << message({"prog", "--accumulate", "abc"});
  EXPECT_NE(message({"prog", "--checkpoint-every", "-1"}).find("'-1' is not an integer in [0, "),
            std::string::npos);
  // The progress and MFU flags: NaN, text and negatives are refused by name.
  EXPECT_NE(message({"prog", "--progress-interval", "nan"}).find("--progress-interval: 'nan' is not a number in [0, 1e+06]"),
            std::string::npos)
      << message({"prog", "--progress-interval", "nan"});
  EXPECT_NE(message({"prog", "--flops-per-sample", "abc"}).find("'abc' is not a number in [0, 1e+30]"),
            std::string::npos);
  EXPECT_NE(message({"prog", "--peak-flops", "-1"}).find("'-1' is not a number"), std::string::npos);
  EXPECT_NE(message({"prog", "--progress", "sometimes"}).find("--progress"), std::string::npos);
  {
    auto fabric = parse({"prog", "--progress", "off", "--progress-every", "7", "--progress-interval", "2.5",
                         "--flops-per-sample", "1e6", "--peak-flops", "2e9"});
    EXPECT_EQ(fabric.options().progress().style(), rankwise::monitor::ProgressBarStyle::kOff);
    EXPECT_EQ(fabric.options().progress().every_n_steps(), 7);
    EXPECT_EQ(fabric.options().progress().line_interval(), std::chrono::milliseconds(2500));
    EXPECT_EQ(fabric.options().flops_per_sample(), 1e6);
    EXPECT_EQ(fabric.options().peak_flops(), 2e9);
  }
}

TEST(Fabric, OneAtATimeAndNoSilentlyIgnoredSettings) {
  {
    rankwise::Fabric fabric(quiet());
    EXPECT_THROW({ rankwise::Fabric second(quiet()); }, rankwise::ConfigError);  // while the first lives
    auto net = std::make_shared<Net>();
    torch::optim::SGD optimizer(net->parameters(), 0.1);
    auto ddp = fabric.setup(net, optimizer);
    EXPECT_THROW(fabric.setup_dataloader(Numbers(0), 2), rankwise::ConfigError);  // empty
  }
  rankwise::Fabric again(quiet());  // after the first is gone
  (void)again;
}

TEST(Fabric, ResumeOrCheckpointEveryWithoutADirectoryIsAnError) {
  EXPECT_THROW(rankwise::Fabric(quiet().resume(rankwise::Resume::kLatest)), rankwise::ConfigError);
  EXPECT_THROW(rankwise::Fabric(quiet().checkpoint_every(5)), rankwise::ConfigError);
  EXPECT_THROW(rankwise::Fabric(quiet().checkpoint_async(true)), rankwise::ConfigError);
}

namespace {

// Trains a Linear(2, 3) (no dropout) for one epoch on Numbers(7 * world) with
// SGD and momentum, batches of `batch`, accumulating over `accumulate`
// batches; `pattern` gets, per batch, 'a' when the batch accumulated and 's'
// when the optimizer stepped. Returns the parameters and fabric.step().
std::pair<std::vector<torch::Tensor>, int64_t> train_linear(int64_t batch, int64_t accumulate,
                                                            std::string* pattern = nullptr) {
  rankwise::Fabric fabric(quiet().seed(11).accumulate(accumulate));
  auto net = torch::nn::Linear(2, 3);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(7 * fabric.world_size()), batch);
  for (int64_t epoch : fabric.epochs(1)) {
    (void)epoch;
    for (auto& b : loader) {
      const bool accumulating = fabric.is_accumulating();
      fabric.backward(torch::cross_entropy_loss(ddp.forward(b.data / 10), b.target));
      EXPECT_EQ(ddp.accumulating(), accumulating);  // no_sync() exactly on those batches
      const bool stepped = fabric.optimizer_step();
      EXPECT_EQ(stepped, !accumulating);
      if (pattern != nullptr) *pattern += stepped ? 's' : 'a';
    }
  }
  std::vector<torch::Tensor> params;
  for (auto& p : net->parameters()) params.push_back(p.detach().clone());
  return {params, fabric.step()};
}

}  // namespace

TEST(Fabric, AccumulateStepsTheOptimizerAtEachGroupsEndAndAtThePassEnd) {
  std::string pattern;
  const auto [params, steps] = train_linear(1, 3, &pattern);
  EXPECT_EQ(pattern, "aasaass");  // 7 batches: groups of 3, 3 and the last 1
  EXPECT_EQ(steps, 3);            // step() counts optimizer steps
  EXPECT_THROW(rankwise::Fabric(quiet().accumulate(0)), rankwise::ConfigError);
}

TEST(Fabric, AccumulatingBatchesGivesTheParametersOfOneLargeBatch) {
  // 7 batches of 1 accumulated as one group: the mean over the 7 samples.
  const auto [accumulated, steps] = train_linear(1, 7);
  const auto [large, large_steps] = train_linear(7, 1);
  EXPECT_EQ(steps, 1);
  EXPECT_EQ(large_steps, 1);
  // Batches of 2, 2, 2 and 1 as one group: each loss weighed by its share
  // of the 7 samples, not by 1/4, gives the same mean.
  const auto [uneven, uneven_steps] = train_linear(2, 4);
  EXPECT_EQ(uneven_steps, 1);
  for (std::size_t k = 0; k < large.size(); ++k) {
    EXPECT_TRUE(torch::allclose(uneven[k], large[k], 1e-5, 1e-6))
        << (uneven[k] - large[k]).abs().max().item<double>();
  }
  ASSERT_EQ(accumulated.size(), large.size());
  for (std::size_t k = 0; k < large.size(); ++k) {
    EXPECT_TRUE(torch::allclose(accumulated[k], large[k], 1e-5, 1e-6))
        << (accumulated[k] - large[k]).abs().max().item<double>();
  }
  // And it really trained: the parameters moved from the seed's.
  torch::manual_seed(11);
  auto initial = torch::nn::Linear(2, 3);
  EXPECT_FALSE(torch::allclose(initial->weight, large[0]));
}

TEST(Fabric, RankZeroFirstRunsRankZerosBlockBeforeTheOthers) {
  for (const bool local : {false, true}) {
    rankwise::Fabric fabric(quiet());
    const fs::path order = shared_dir(local ? "first_local" : "first_global");
    if (fabric.is_global_zero()) fs::remove(order);
    fabric.barrier();
    auto append = [&](const std::string& line) {
      std::ofstream(order, std::ios::app) << line << "\n";
    };
    fabric.rank_zero_first(
        [&] {
          append(std::to_string(fabric.rank()) + " begin");
          // Rank 0's block is slow (a download): the others must still wait.
          if (fabric.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
          append(std::to_string(fabric.rank()) + " end");
        },
        local);
    fabric.barrier();
    std::ifstream in(order);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 2u * fabric.world_size()) << "local " << local;
    EXPECT_EQ(lines[0], "0 begin");
    EXPECT_EQ(lines[1], "0 end");
    fabric.barrier();
  }
}

TEST(Fabric, RankZeroFirstThatThrowsOnRankZeroRaisesOnEveryRankWithoutRunningTheirs) {
  rankwise::Fabric fabric(quiet());
  bool ran = false;
  auto block = [&] {
    ran = true;
    if (fabric.rank() == 0) throw rankwise::ConfigError("no data: the download failed");
  };
  if (fabric.is_global_zero()) {
    EXPECT_THROW(fabric.rank_zero_first(block), rankwise::ConfigError);
    EXPECT_TRUE(ran);
  } else {
    try {
      fabric.rank_zero_first(block);
      ADD_FAILURE() << "rank " << fabric.rank() << " went on after rank 0 failed";
    } catch (const rankwise::PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 failed in its block"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(ran);
  }
  EXPECT_EQ(fabric.all_reduce(1.0), fabric.world_size());  // the group is still usable
}

TEST(Fabric, ClipGradientsClipsTheModelsGradientsByTheirTotalNorm) {
  rankwise::Fabric fabric(quiet().seed(2));
  auto net = torch::nn::Linear(2, 3);
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  EXPECT_THROW(fabric.clip_gradients(1.0), rankwise::Error);  // before setup
  auto ddp = fabric.setup(net, optimizer);
  auto x = torch::arange(8, torch::kFloat32).reshape({4, 2}) + fabric.rank();
  fabric.backward(ddp.forward(x).pow(2).sum());
  auto norm_of_grads = [&] {
    double sum = 0;
    for (auto& p : net->parameters()) sum += p.grad().pow(2).sum().item<double>();
    return std::sqrt(sum);
  };
  const double before = norm_of_grads();
  ASSERT_GT(before, 1.0);
  const auto total = fabric.clip_gradients(1.0);
  EXPECT_NEAR(total.item<double>(), before, 1e-4 * before);
  EXPECT_NEAR(norm_of_grads(), 1.0, 1e-4);
  EXPECT_THROW(fabric.clip_gradients(1.0, -2.0), rankwise::ConfigError);
}

TEST(Fabric, LogWritesTheMetricsDirsJsonLinesCsvAndTensorBoardFiles) {
  const fs::path dir = shared_dir("metrics") / "run";
  {
    rankwise::Fabric fabric(quiet());
    EXPECT_EQ(fabric.metrics_log(), nullptr);
    fabric.log("loss", 1.0);  // no metrics_dir: nothing to write
    if (fabric.is_global_zero()) fs::remove_all(dir.parent_path());
    fabric.barrier();
  }
  rankwise::Fabric fabric(quiet().metrics_dir(dir.string()));
  fabric.log_hyperparams({{"lr", 0.5}, {"model", std::string("mlp")}});
  ASSERT_NE(fabric.metrics_log(), nullptr);  // opens the log: its config record is written
  EXPECT_THROW(fabric.log_hyperparams({{"late", int64_t{1}}}), rankwise::ConfigError);
  fabric.log("loss", 0.5);
  fabric.log_dict({{"accuracy", 0.75}, {"zero", 0.0}});
  fabric.barrier();
  if (fabric.is_global_zero()) {
    std::ifstream jsonl(dir / "metrics.jsonl");
    std::vector<nlohmann::json> records;
    for (std::string line; std::getline(jsonl, line);) records.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records[0]["kind"], "config");
    EXPECT_EQ(records[0]["world_size"], fabric.world_size());
    EXPECT_EQ(records[0]["config"]["lr"], 0.5);
    EXPECT_EQ(records[0]["config"]["model"], "mlp");
    EXPECT_EQ(records[0]["config"]["program"], "mp_test_fabric");
    EXPECT_EQ(records[0]["config"]["precision"], "32-true");
    EXPECT_EQ(records[1]["kind"], "step");
    EXPECT_EQ(records[1]["step"], 0);
    EXPECT_EQ(records[1]["epoch"], 1);
    EXPECT_EQ(records[1]["metrics"], nlohmann::json({{"loss", 0.5}}));
    EXPECT_EQ(records[2]["metrics"]["accuracy"], 0.75);
    EXPECT_EQ(records[2]["metrics"]["zero"], 0.0);
    std::ifstream csv(dir / "metrics.csv");
    const std::string text((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("step,0,1,"), std::string::npos) << text;
    EXPECT_NE(text.find(",accuracy,0.75"), std::string::npos) << text;
    int event_files = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
        ++event_files;
        EXPECT_GT(fs::file_size(entry.path()), 0u);
      }
    }
    EXPECT_EQ(event_files, 1);
  }
  fabric.barrier();
}

// The Fabric's progress (FabricOptions::progress): one reduction every
// every_n_steps batches and one for the rest at the pass's end; each writes a
// step record of the sample-weighted loss over ranks, samples/s, MFU
// (samples/s * FLOPs per sample / (world size * peak)) and every rank's
// statistics; throughput() is the same on every rank.
TEST(Fabric, ProgressReducesOnScheduleAndLogsLossThroughputAndMfu) {
  const fs::path dir = shared_dir("progress");
  rankwise::Fabric fabric(quiet()
                              .metrics_dir(dir.string())
                              .progress(rankwise::monitor::ProgressBarOptions().every_n_steps(2).style(
                                  rankwise::monitor::ProgressBarStyle::kOff))
                              .flops_per_sample(1000)
                              .peak_flops(1e9));
  const int world = fabric.world_size();
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(10 * world), /*batch_size=*/2);  // 5 batches per rank
  std::vector<double> loss_sums(3, 0.0);  // this rank's loss * samples per reduction: batches 1-2, 3-4, 5
  int64_t batch = 0;
  for (int64_t epoch : fabric.epochs(1)) {
    (void)epoch;
    for (auto& b : loader) {
      auto loss = torch::cross_entropy_loss(ddp.forward(b.data), b.target);
      fabric.backward(loss);
      fabric.optimizer_step();
      loss_sums[std::min<int64_t>(batch++ / 2, 2)] += loss.item<double>() * b.data.size(0);
    }
    fabric.log("after_pass", 1.0);  // the loop body's epoch, though the loader moved on
    fabric.log_epoch({{"done", 1.0}});
  }
  const auto throughput = fabric.throughput();
  ASSERT_TRUE(throughput.mfu.has_value());
  EXPECT_DOUBLE_EQ(*throughput.flops_per_sample, 1000);
  EXPECT_DOUBLE_EQ(*throughput.mfu, throughput.samples_per_s * 1000 / (world * 1e9));
  const auto everyone = fabric.all_gather(torch::tensor({throughput.samples_per_s, throughput.epoch_samples_per_s},
                                                        torch::kFloat64));
  for (const auto& other : everyone) EXPECT_TRUE(other.equal(everyone.front()));
  const auto sums = fabric.all_gather(torch::tensor(loss_sums, torch::kFloat64));
  fabric.barrier();
  if (!fabric.is_global_zero()) return;
  std::ifstream jsonl(dir / "metrics.jsonl");
  std::vector<nlohmann::json> steps, epochs;
  for (std::string line; std::getline(jsonl, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["kind"] == "step" && record["metrics"].contains("after_pass")) {
      EXPECT_EQ(record["epoch"], 1) << record;
      continue;
    }
    if (record["kind"] == "step") steps.push_back(record);
    if (record["kind"] == "epoch") epochs.push_back(record);
  }
  ASSERT_EQ(steps.size(), 3u);
  const int64_t samples[3] = {4, 4, 2};  // per rank in each reduction
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(steps[k]["step"], std::min(2 * (k + 1), 5)) << steps[k];
    double total = 0;
    for (const auto& s : sums) total += s[k].item<double>();
    EXPECT_NEAR(steps[k]["metrics"]["loss"].get<double>(), total / (samples[k] * world), 1e-6) << steps[k];
    const double per_second = steps[k]["samples_per_s"].get<double>();
    EXPECT_GT(per_second, 0);
    EXPECT_NEAR(steps[k]["metrics"]["mfu"].get<double>(), per_second * 1000 / (world * 1e9), 1e-12 * per_second);
    EXPECT_EQ(steps[k]["ranks"].size(), static_cast<size_t>(world));
  }
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0]["epoch"], 1);
  EXPECT_EQ(epochs[0]["step"], 5);
  EXPECT_DOUBLE_EQ(epochs[0]["samples_per_s"].get<double>(), throughput.epoch_samples_per_s);
}

// Clipping inside an accumulation group would clip this rank's partial,
// unaveraged gradients: an Error at every precision, as under 16-mixed.
TEST(Fabric, ClipGradientsWhileAccumulatingIsAnError) {
  rankwise::Fabric fabric(quiet().accumulate(2));
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(4 * fabric.world_size()), 2);
  int batch = 0;
  for (auto& b : loader) {
    fabric.backward(torch::cross_entropy_loss(ddp.forward(b.data), b.target));
    if (batch++ == 0) {
      try {
        fabric.clip_gradients(1.0);
        ADD_FAILURE() << "clip_gradients was accepted mid-accumulation";
      } catch (const rankwise::Error& e) {
        EXPECT_NE(std::string(e.what()).find("in a batch that accumulates"), std::string::npos) << e.what();
      }
    } else {
      EXPECT_GT(fabric.clip_gradients(1e9).item<double>(), 0);  // the group's end: allowed
    }
    fabric.optimizer_step();
  }
}

// A new run in a metrics directory replaces the earlier run's log, CSV and
// TensorBoard files (one run's curves, not two mixed); a resume appends.
TEST(Fabric, ANewRunReplacesAnEarlierRunsMetrics) {
  const fs::path dir = shared_dir("replace");
  auto run = [&](rankwise::Resume resume) {
    rankwise::Fabric fabric(quiet().metrics_dir(dir.string()).resume(resume).checkpoint_dir(
        resume == rankwise::Resume::kLatest ? (dir / "ckpt").string() : ""));
    fabric.log("x", 1.0);
    fabric.barrier();
  };
  auto count = [&](const std::string& prefix) {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(dir)) n += entry.path().filename().string().rfind(prefix, 0) == 0;
    return n;
  };
  auto configs = [&] {
    std::ifstream jsonl(dir / "metrics.jsonl");
    int n = 0;
    for (std::string line; std::getline(jsonl, line);) n += nlohmann::json::parse(line)["kind"] == "config";
    return n;
  };
  run(rankwise::Resume::kNew);
  run(rankwise::Resume::kNew);
  {
    rankwise::Fabric probe(quiet());  // only to synchronise the ranks' reads
    if (probe.is_global_zero()) {
      EXPECT_EQ(count("events.out.tfevents."), 1);
      EXPECT_EQ(configs(), 1);
    }
    probe.barrier();
  }
  run(rankwise::Resume::kLatest);  // appends: a second segment, a second event file
  rankwise::Fabric probe(quiet());
  if (probe.is_global_zero()) {
    EXPECT_EQ(count("events.out.tfevents."), 2);
    EXPECT_EQ(configs(), 2);
  }
  probe.barrier();
}

// --checkpoint-async: saves in the background, the metrics log's step records
// say what they cost, and the last epoch's save is durable when the loop ends.
TEST(Fabric, AsyncCheckpointsAreTimedInTheMetricsLogAndDoneAtTheEnd) {
  const fs::path dir = shared_dir("async_checkpoints");
  std::vector<std::string> args = {"prog", "--checkpoint-async"};
  std::vector<char*> argv = {args[0].data(), args[1].data(), nullptr};
  int argc = 2;
  rankwise::Fabric fabric(argc, argv.data(),
                          quiet()
                              .metrics_dir(dir.string())
                              .checkpoint_dir((dir / "ckpt").string())
                              .checkpoint_every(2)
                              .progress(rankwise::monitor::ProgressBarOptions().every_n_steps(2).style(
                                  rankwise::monitor::ProgressBarStyle::kOff)));
  ASSERT_TRUE(fabric.options().checkpoint_async());
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Numbers(10 * fabric.world_size()), /*batch_size=*/2);
  for (int64_t epoch : fabric.epochs(1)) {
    (void)epoch;
    for (auto& b : loader) {
      fabric.backward(torch::cross_entropy_loss(ddp.forward(b.data), b.target));
      fabric.optimizer_step();
    }
  }
  // The loop's end waited for the epoch-end save (step 5): it is the latest.
  // An explicit save() is synchronous: its file is there when it returns.
  EXPECT_TRUE(fs::exists(fabric.save())) << "rank " << fabric.rank();
  std::ifstream latest(dir / "ckpt" / "latest");
  std::string named;
  std::getline(latest, named);
  EXPECT_EQ(named, "checkpoint-0000000005.pt") << "rank " << fabric.rank();
  fabric.barrier();
  if (!fabric.is_global_zero()) return;
  std::ifstream jsonl(dir / "metrics.jsonl");
  int timed = 0;
  for (std::string line; std::getline(jsonl, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["kind"] != "step" || !record["metrics"].contains("checkpoint_blocked_ms")) continue;
    ++timed;
    const double blocked = record["metrics"]["checkpoint_blocked_ms"].get<double>();
    const double waited = record["metrics"]["checkpoint_waited_ms"].get<double>();
    EXPECT_GE(waited, 0) << record;
    EXPECT_GE(blocked, waited) << record;  // the wait is part of the blocking
  }
  EXPECT_EQ(timed, 2) << "the step records after the saves of steps 2 and 4";
}
