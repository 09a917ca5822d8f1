// capture()/restore() in one process: model, optimizer, counters, RNG,
// metric states and extras come back exactly; bad checkpoints are named.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>

#include "rankwise/checkpoint/rng_state.h"
#include "rankwise/checkpoint/training_state.h"
#include "rankwise/error.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/collection.h"

namespace {

struct Net : torch::nn::Module {
  Net() : fc(register_module("fc", torch::nn::Linear(4, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc;
};

void train_step(Net& net, torch::optim::Optimizer& opt) {
  opt.zero_grad();
  net.forward(torch::randn({8, 4})).pow(2).sum().backward();
  opt.step();
}

}  // namespace

TEST(TrainingState, ResumeContinuesExactlyAsIfNeverStopped) {
  torch::manual_seed(7);
  Net net;
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  rankwise::metrics::MetricCollection metrics;
  auto loss = metrics.add("loss", std::make_shared<rankwise::metrics::Mean>());
  for (int i = 0; i < 3; ++i) train_step(net, opt);
  loss->update(torch::tensor({1.0, 2.0, 6.0}, torch::kFloat64));

  rankwise::TrainingState state;
  state.model = &net;
  state.optimizer = &opt;
  state.step = 3;
  state.epoch = 1;
  state.position = 192;
  state.metrics["train"] = &metrics;
  state.extras["best_accuracy"] = 0.875;
  state.extras["note"] = std::string("warmup done");
  state.extras["ema"] = torch::arange(3, torch::kFloat32);
  // Through a file, as a real resume does (capture()'s "model" entry aliases
  // the live parameters, like state_dict()).
  const std::string path = "/tmp/rankwise_training_state_" + std::to_string(::getpid()) + ".pt";
  rankwise::save(path, rankwise::capture(state));
  const auto checkpoint = rankwise::load(path);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());

  // The uninterrupted run goes on...
  for (int i = 0; i < 2; ++i) train_step(net, opt);
  loss->update(torch::tensor({5.0}, torch::kFloat64));
  const auto expected_weight = net.fc->weight.clone();
  const auto expected_loss = metrics.compute().at("loss").item<double>();

  // ...and a fresh process resumes from the checkpoint.
  torch::manual_seed(12345);
  Net resumed;
  torch::optim::SGD resumed_opt(resumed.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  rankwise::metrics::MetricCollection resumed_metrics;
  auto resumed_loss = resumed_metrics.add("loss", std::make_shared<rankwise::metrics::Mean>());
  rankwise::TrainingState target;
  target.model = &resumed;
  target.optimizer = &resumed_opt;
  target.metrics["train"] = &resumed_metrics;
  rankwise::restore(checkpoint, target);
  EXPECT_EQ(target.step, 3);
  EXPECT_EQ(target.epoch, 1);
  EXPECT_EQ(target.position, 192);
  EXPECT_EQ(target.extras.at("best_accuracy").toDouble(), 0.875);
  EXPECT_EQ(target.extras.at("note").toStringRef(), "warmup done");
  EXPECT_TRUE(torch::equal(target.extras.at("ema").toTensor(), torch::arange(3, torch::kFloat32)));
  for (int i = 0; i < 2; ++i) train_step(resumed, resumed_opt);
  resumed_loss->update(torch::tensor({5.0}, torch::kFloat64));
  EXPECT_TRUE(torch::equal(resumed.fc->weight, expected_weight));  // bitwise: RNG and momentum restored
  EXPECT_EQ(resumed_metrics.compute().at("loss").item<double>(), expected_loss);
  EXPECT_EQ(expected_loss, 14.0 / 4);
}

TEST(TrainingState, RngStateRoundTrip) {
  torch::manual_seed(3);
  const auto saved = rankwise::rng_state();
  const auto first = torch::rand({5});
  torch::manual_seed(99);
  rankwise::set_rng_state(saved);
  EXPECT_TRUE(torch::equal(torch::rand({5}), first));
  EXPECT_EQ(saved.toGenericDict().at("cpu").toTensor().numel(), 5056);
  EXPECT_THROW(rankwise::set_rng_state(c10::IValue(int64_t{3})), rankwise::CheckpointError);
}

TEST(TrainingState, WrongCheckpointsAreNamed) {
  Net net;
  rankwise::TrainingState target;
  target.model = &net;
  rankwise::Checkpoint plain;
  plain.insert("model", int64_t{1});
  try {
    rankwise::restore(plain, target);
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a training state"), std::string::npos) << e.what();
  }
  rankwise::TrainingState source;
  source.model = &net;
  source.step = 40;
  auto checkpoint = rankwise::capture(source);
  checkpoint.insert("world_size", int64_t{4});
  checkpoint.insert("position", int64_t{128});  // mid-epoch
  try {
    rankwise::restore(checkpoint, target);
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("written by 4 ranks in the middle of an epoch and this "
                                         "run has 1"),
              std::string::npos)
        << e.what();
  }
  // At an epoch end, another world size is fine (per-rank states are not restored).
  checkpoint.insert("position", int64_t{0});
  checkpoint.insert("rank_states", c10::List<c10::IValue>(c10::AnyType::get()));  // 4 entries in reality
  rankwise::restore(checkpoint, target);
  EXPECT_EQ(target.step, 40);
  // A checkpoint of another model: the error lists the keys.
  struct Other : torch::nn::Module {
    Other() { register_module("head", torch::nn::Linear(2, 2)); }
  } other;
  rankwise::TrainingState other_source;
  other_source.model = &other;
  try {
    rankwise::restore(rankwise::capture(other_source), target);
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("fc.weight"), std::string::npos) << text;
    EXPECT_NE(text.find("head.weight"), std::string::npos) << text;
  }
}
