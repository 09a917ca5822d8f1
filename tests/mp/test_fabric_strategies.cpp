// rankwise-test-nproc: 2 3
//
// rankwise::Fabric's strategies (FabricOptions::strategy): one training loop
// (setup_module, an optimizer over model.parameters(), setup_optimizers)
// runs unchanged under ddp, zero1 and fsdp and gives the same losses and
// parameters; zero1 and fsdp write sharded checkpoints that resume bitwise;
// the mistakes the strategies make possible are ConfigErrors saying what
// to do.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "rankwise/checkpoint/sharded_metadata.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"
#include "rankwise/fabric.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kBatch = 2;  // per rank
constexpr int64_t kSteps = 6;  // one epoch of 6 batches on every rank

// Sample i of n: x = [sin(i), cos(i), i / n] (float32 [B, 3]), y = [sin(2i)] ([B, 1]).
class Points : public torch::data::datasets::BatchDataset<Points, torch::data::Example<>> {
 public:
  explicit Points(int64_t n) : n_(n) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto i = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end())).to(torch::kFloat32);
    return {torch::stack({torch::sin(i), torch::cos(i), i / n_}, 1), torch::sin(2 * i).unsqueeze(1)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

// A small MLP whose last Linear has 1 output row: fewer rows than ranks,
// so under fsdp some ranks hold none of it.
struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(3, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 8));
    fc3 = register_module("fc3", torch::nn::Linear(8, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc3(torch::tanh(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

rankwise::FabricOptions quiet(const std::string& strategy) {
  rankwise::FabricOptions options;
  options.print_header(false).timeout(std::chrono::seconds(60)).seed(11).strategy(strategy);
  options.fsdp().units(rankwise::parallel::UnitPolicy().of_type<torch::nn::LinearImpl>());
  return options;
}

// A directory every rank of this run shares (the store's port is unique per run).
fs::path shared_dir(const std::string& name) {
  const auto port = rankwise::get_env("MASTER_PORT").value_or("solo" + std::to_string(::getpid()));
  return fs::temp_directory_path() / ("rankwise_mp_fabric_strategies_" + port + "_" + name);
}

struct Outcome {
  std::vector<double> losses;                   // each step's loss, averaged over the ranks
  std::map<std::string, torch::Tensor> params;  // the final parameters at full size
  bool optimizer_has_state = false;             // the user's optimizer was stepped
};

// The one training loop: AdamW, float32, kSteps steps. With a checkpoint
// directory it saves every 3 steps; `crash_after` > 0 throws at the start of
// the batch after that step; with `load`, fabric.load(load) first.
Outcome train(rankwise::FabricOptions options, int64_t crash_after = 0, const std::string& load = "") {
  rankwise::Fabric fabric(options);
  auto model = fabric.setup_module(std::make_shared<Mlp>());
  torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(0.02).weight_decay(0.1));
  fabric.setup_optimizers(optimizer);
  auto loader = fabric.setup_dataloader(Points(kSteps * kBatch * fabric.world_size()), kBatch);
  if (!load.empty()) fabric.load(load);
  Outcome run;
  for (int64_t epoch : fabric.epochs(1)) {
    (void)epoch;
    for (auto& batch : loader) {
      if (crash_after > 0 && fabric.step() == crash_after) throw std::runtime_error("crash");
      auto loss = torch::mse_loss(model(batch.data), batch.target);
      fabric.backward(loss);
      fabric.optimizer_step();
      run.losses.push_back(fabric.all_reduce(loss.item<double>()) / fabric.world_size());
    }
  }
  run.params = model.full_state_dict();
  run.optimizer_has_state = !optimizer.state().empty();
  return run;
}

// max |a - b| / max |b|: how far `a` is from `b`, relative to b's size.
double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-12);
}

void expect_same_run(const Outcome& run, const Outcome& reference, const std::string& what) {
  ASSERT_EQ(run.losses.size(), static_cast<std::size_t>(kSteps)) << what;
  ASSERT_EQ(reference.losses.size(), static_cast<std::size_t>(kSteps)) << what;
  for (int64_t s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5 * std::abs(reference.losses[s]))
        << what << ": the loss of step " << s + 1;
  }
  ASSERT_EQ(run.params.size(), reference.params.size()) << what;
  for (const auto& [name, expected] : reference.params) {
    ASSERT_TRUE(run.params.count(name)) << what << ": no parameter " << name;
    const auto& actual = run.params.at(name);
    ASSERT_EQ(actual.sizes(), expected.sizes()) << what << ": " << name;
    EXPECT_LE(relative_difference(actual.cpu(), expected.cpu()), 1e-5) << what << ": " << name;
  }
}

void expect_bitwise(const Outcome& run, const Outcome& reference, const std::string& what) {
  ASSERT_EQ(run.params.size(), reference.params.size()) << what;
  for (const auto& [name, expected] : reference.params) {
    ASSERT_TRUE(run.params.count(name)) << what << ": no parameter " << name;
    EXPECT_TRUE(torch::equal(run.params.at(name), expected)) << what << ": " << name << " differs";
  }
}

// Runs `block` and returns the ConfigError's message ("" when none was thrown).
template <typename Block>
std::string config_error_of(Block block) {
  try {
    block();
  } catch (const rankwise::ConfigError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST(FabricStrategies, OneLoopGivesTheSameLossesAndParametersUnderEachStrategy) {
  const Outcome ddp = train(quiet("ddp"));
  const Outcome zero1 = train(quiet("zero1"));
  const Outcome fsdp = train(quiet("fsdp"));
  expect_same_run(zero1, ddp, "zero1 against ddp");
  expect_same_run(fsdp, ddp, "fsdp against ddp");
  EXPECT_TRUE(ddp.optimizer_has_state);
  EXPECT_FALSE(zero1.optimizer_has_state) << "zero1 steps its ZeroRedundancyOptimizer, not the user's";
  EXPECT_TRUE(fsdp.optimizer_has_state);
}

TEST(FabricStrategies, MixedPrecisionUnderFsdpIsItsPolicy) {
  {
    rankwise::Fabric fabric(quiet("fsdp").precision("bf16-mixed"));
    const auto& policy = fabric.options().fsdp().mixed_precision();
    EXPECT_EQ(policy.param_dtype(), torch::kBFloat16);
    EXPECT_EQ(policy.reduce_dtype(), torch::kFloat32);
    EXPECT_EQ(policy.output_dtype(), torch::kFloat32);  // the loss in float32, as under ddp's autocast
    EXPECT_EQ(fabric.grad_scaler(), nullptr);
    auto model = fabric.setup_module(std::make_shared<Mlp>());
    EXPECT_EQ(model(torch::ones({2, 3})).scalar_type(), torch::kFloat32);
  }
  std::string error = config_error_of([] { rankwise::Fabric fabric(quiet("fsdp").precision("bf16-true")); });
  EXPECT_NE(error.find("use bf16-mixed"), std::string::npos) << error;
  auto own = quiet("fsdp").precision("bf16-mixed");
  own.fsdp().mixed_precision().param_dtype(torch::kBFloat16);
  error = config_error_of([&] { rankwise::Fabric fabric(own); });
  EXPECT_NE(error.find("precision 32-true"), std::string::npos) << error;
}

TEST(FabricStrategies, ShardedStrategiesResumeBitwiseFromTheirShardedCheckpoints) {
  for (const std::string strategy : {"fsdp", "zero1"}) {
    const Outcome whole = train(quiet(strategy));
    const fs::path dir = shared_dir("resume_" + strategy);  // new: the port is this run's
    // fsdp saves synchronously and its run is killed after step 3; zero1
    // saves in the background (--checkpoint-async) and runs to the end: a
    // sharded save in flight is published by the next save, so a kill
    // would lose it.
    const bool async = strategy == "zero1";
    auto options = quiet(strategy).checkpoint_dir(dir.string()).checkpoint_every(3).checkpoint_async(async);
    if (async) {
      train(options);
    } else {
      EXPECT_THROW(train(options, /*crash_after=*/3), std::runtime_error);
    }
    // Each rank wrote its shards into one directory per checkpoint: the
    // model under "model.", the optimizer under "optim.", the training state under "fabric.".
    const auto stored = rankwise::checkpoint::read_sharded_metadata((dir / "checkpoint-0000000003").string());
    for (const char* key : {"model.fc1.weight", "model.fc3.bias", "optim.state.0.exp_avg", "fabric.step",
                            "fabric.position", "fabric.rank_states", "fabric.extras", "fabric.optimizer_type"}) {
      EXPECT_TRUE(stored.count(key)) << strategy << ": the checkpoint has no " << key;
    }
    if (!async) {
      const Outcome resumed = train(options.resume(rankwise::Resume::kLatest));
      EXPECT_EQ(resumed.losses.size(), static_cast<std::size_t>(kSteps - 3)) << strategy;
      expect_bitwise(resumed, whole, strategy + " resumed at step 3 against a run that never stopped");
    }
    const Outcome loaded = train(quiet(strategy), 0, (dir / "checkpoint-0000000003").string());
    expect_bitwise(loaded, whole, strategy + " after fabric.load() of step 3");
    // The directory now holds this run's checkpoints: a new run is refused,
    // and one that overwrites removes them.
    const std::string refused = config_error_of([&] { train(quiet(strategy).checkpoint_dir(dir.string())); });
    EXPECT_NE(refused.find("holds checkpoints of an earlier run"), std::string::npos) << refused;
    {
      rankwise::Fabric overwriting(quiet(strategy).checkpoint_dir(dir.string()).resume(rankwise::Resume::kOverwrite));
      overwriting.barrier();
      EXPECT_FALSE(fs::exists(dir / "checkpoint-0000000003")) << strategy;
      EXPECT_FALSE(fs::exists(dir / "latest")) << strategy;
    }
    rankwise::dist::process_group().barrier();  // every rank is done with it
    if (rankwise::dist::rank() == 0) fs::remove_all(dir);
  }
}

// A resume restores the optimizer's options with its state under every
// strategy, as PyTorch's load_state_dict does: the checkpoint's learning
// rate and weight decay, not the ones the resumed program set.
TEST(FabricStrategies, AResumeRestoresTheOptimizersOptionsUnderEachStrategy) {
  for (const std::string strategy : {"ddp", "zero1", "fsdp"}) {
    const fs::path dir = shared_dir("options_" + strategy);
    auto options = quiet(strategy).checkpoint_dir(dir.string());
    auto run = [&](double lr, double weight_decay) {
      rankwise::Fabric fabric(options);
      auto model = fabric.setup_module(std::make_shared<Mlp>());
      torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
      fabric.setup_optimizers(optimizer);
      auto loader = fabric.setup_dataloader(Points(kSteps * kBatch * fabric.world_size()), kBatch);
      for (int64_t epoch : fabric.epochs(1)) {
        (void)epoch;
        const auto& group = static_cast<const torch::optim::AdamWOptions&>(optimizer.param_groups()[0].options());
        EXPECT_EQ(group.lr(), 0.02) << strategy;
        EXPECT_EQ(group.weight_decay(), 0.25) << strategy;
        for (auto& batch : loader) {
          fabric.backward(torch::mse_loss(model(batch.data), batch.target));
          fabric.optimizer_step();
          break;  // one step, then an explicit save
        }
        fabric.save();
        break;
      }
    };
    run(0.02, 0.25);
    options.resume(rankwise::Resume::kLatest);
    run(0.05, 0.5);  // the checkpoint's 0.02 and 0.25 come back
    rankwise::dist::process_group().barrier();
    if (rankwise::dist::rank() == 0) fs::remove_all(dir);
  }
}

TEST(FabricStrategies, ACheckpointDirectoryOfAnotherKindOfStrategyIsRefusedOrReplaced) {
  const fs::path dir = shared_dir("kinds");
  train(quiet("ddp").checkpoint_dir(dir.string()).checkpoint_every(3));  // replicated files
  for (const std::string strategy : {"zero1", "fsdp"}) {
    for (const auto resume : {rankwise::Resume::kLatest, rankwise::Resume::kNew}) {
      const std::string error = config_error_of([&] {
        rankwise::Fabric fabric(quiet(strategy).checkpoint_dir(dir.string()).resume(resume));
      });
      EXPECT_NE(error.find("holds 2 replicated checkpoint(s), which strategy " + strategy + " does not read"),
                std::string::npos)
          << error;
    }
  }
  {
    rankwise::Fabric overwriting(quiet("fsdp").checkpoint_dir(dir.string()).resume(rankwise::Resume::kOverwrite));
    overwriting.barrier();
    EXPECT_FALSE(fs::exists(dir / "checkpoint-0000000003.pt"));
    EXPECT_FALSE(fs::exists(dir / "checkpoint-0000000006.pt"));
  }
  rankwise::dist::process_group().barrier();
  if (rankwise::dist::rank() == 0) fs::remove_all(dir);
}

TEST(FabricStrategies, AnUnknownStrategyIsAConfigErrorNamingTheKnownOnes) {
  const std::string error = config_error_of([] { rankwise::Fabric fabric(quiet("deepspeed")); });
  EXPECT_NE(error.find("'deepspeed' is not a strategy; use ddp, fsdp or zero1"), std::string::npos) << error;
}

// An fsdp forward gathers parameters (a collective): an evaluation set that
// does not split evenly must not leave one rank a batch short.
TEST(FabricStrategies, EvaluationOnAnUnevenSetRunsTheSameBatchesOnEveryRankAndCountsEachSampleOnce) {
  for (const std::string strategy : {"ddp", "fsdp"}) {
    rankwise::Fabric fabric(quiet(strategy));
    auto model = fabric.setup_module(std::make_shared<Mlp>());
    const int64_t n = 4 * fabric.world_size() + 1;  // the last batch on rank 0 only, unpadded
    auto loader = fabric.setup_eval_dataloader(Points(n), 4);
    torch::NoGradGuard no_grad;
    int64_t batches = 0, real = 0;
    double sum = 0;
    for (auto& batch : loader) {
      auto out = model(batch.data);
      auto keep = loader.padding_mask().empty() ? torch::ones({out.size(0)}, torch::kBool)
                                                : loader.padding_mask().keep(out.size(0), "eval");
      real += keep.sum().item<int64_t>();
      sum += out.squeeze(1).masked_select(keep).sum().item<double>();
      ++batches;
    }
    EXPECT_EQ(fabric.all_reduce(static_cast<double>(real)), n) << strategy;
    const double total = fabric.all_reduce(sum);
    if (strategy == "fsdp") {
      EXPECT_EQ(fabric.all_reduce(static_cast<double>(batches), rankwise::dist::ReduceOp::kMax),
                fabric.all_reduce(static_cast<double>(batches), rankwise::dist::ReduceOp::kMin));
    }
    EXPECT_TRUE(std::isfinite(total)) << strategy;
  }
}

// Accumulation by hand with the set-up module's own no_sync(): no gradient
// communication inside it, and the step equals one of the whole batch.
TEST(FabricStrategies, NoSyncOnTheSetUpModuleAccumulatesWithoutCommunicationUnderEveryStrategy) {
  for (const std::string strategy : {"ddp", "zero1", "fsdp"}) {
    std::map<std::string, torch::Tensor> params[2];
    for (int by_hand = 0; by_hand < 2; ++by_hand) {
      rankwise::Fabric fabric(quiet(strategy));
      auto model = fabric.setup_module(std::make_shared<Mlp>());
      torch::optim::SGD optimizer(model.parameters(), 0.1);
      fabric.setup_optimizers(optimizer);
      std::vector<size_t> mine;
      for (int k = 0; k < 4; ++k) mine.push_back(static_cast<size_t>(4 * fabric.rank() + k));
      const auto batch = Points(4 * fabric.world_size()).get_batch(mine);
      if (by_hand == 0) {
        fabric.backward(torch::mse_loss(model(batch.data), batch.target));
      } else {
        const int64_t reduces = model.fsdp() ? model.fsdp()->stats().reduce_scatters : 0;
        {
          auto guard = model.no_sync();
          fabric.backward(torch::mse_loss(model(batch.data.narrow(0, 0, 2)), batch.target.narrow(0, 0, 2)) / 2);
        }
        if (model.fsdp()) EXPECT_EQ(model.fsdp()->stats().reduce_scatters, reduces) << strategy;
        if (model.ddp()) EXPECT_TRUE(model.ddp()->accumulating()) << strategy;
        fabric.backward(torch::mse_loss(model(batch.data.narrow(0, 2, 2)), batch.target.narrow(0, 2, 2)) / 2);
      }
      fabric.optimizer_step();
      params[by_hand] = model.full_state_dict();
    }
    for (const auto& [name, p] : params[0]) {
      EXPECT_LT(relative_difference(params[1].at(name), p), 1e-6) << strategy << " " << name;
    }
  }
}

TEST(FabricStrategies, SetupWithAnOptimizerUnderFsdpSaysToUseSetupModule) {
  rankwise::Fabric fabric(quiet("fsdp"));
  auto net = std::make_shared<Mlp>();
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  const std::string error = config_error_of([&] { fabric.setup(net, optimizer); });
  EXPECT_NE(error.find("setup_module"), std::string::npos) << error;
  EXPECT_NE(error.find("setup_optimizers"), std::string::npos) << error;
}

TEST(FabricStrategies, AnOptimizerOverTheUnshardedParametersUnderFsdpIsAConfigError) {
  rankwise::Fabric fabric(quiet("fsdp"));
  auto net = std::make_shared<Mlp>();
  torch::optim::AdamW unsharded(net->parameters(), torch::optim::AdamWOptions(0.01));  // before wrapping
  auto model = fabric.setup_module(net);
  const std::string error = config_error_of([&] { fabric.setup_optimizers(unsharded); });
  EXPECT_NE(error.find("model.parameters()"), std::string::npos) << error;
  torch::optim::AdamW sharded(model.parameters(), torch::optim::AdamWOptions(0.01));
  fabric.setup_optimizers(sharded);  // the right one is taken after the refusal
}

TEST(FabricStrategies, Zero1RefusesAnOptimizerItCannotRebuild) {
  rankwise::Fabric fabric(quiet("zero1"));
  auto model = fabric.setup_module(std::make_shared<Mlp>());
  torch::optim::LBFGS optimizer(model.parameters(), torch::optim::LBFGSOptions(0.1));
  const std::string error = config_error_of([&] { fabric.setup_optimizers(optimizer); });
  EXPECT_NE(error.find("SGD, Adam, AdamW, RMSprop and Adagrad"), std::string::npos) << error;
}

TEST(FabricStrategies, StrategyFlagsFromTheCommandLine) {
  std::vector<std::string> args = {"prog", "--strategy", "fsdp", "--fsdp-reshard-after-forward", "false",
                                   "--fsdp-min-unit-params", "100", "--epochs", "2"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  rankwise::Fabric fabric(argc, argv.data(), quiet("ddp"));
  EXPECT_EQ(fabric.options().strategy(), "fsdp");
  EXPECT_FALSE(fabric.options().fsdp().reshard_after_forward());
  EXPECT_EQ(fabric.options().fsdp().units().min_params(), 100);
  ASSERT_EQ(argc, 3);  // the program's own arguments stay
  EXPECT_EQ(std::string(argv[1]), "--epochs");
}
