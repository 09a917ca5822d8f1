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

  rankwise::checkpoint::TrainingState state;
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
  rankwise::checkpoint::save(path, rankwise::checkpoint::capture(state));
  const auto checkpoint = rankwise::checkpoint::load(path);
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
  rankwise::checkpoint::TrainingState target;
  target.model = &resumed;
  target.optimizer = &resumed_opt;
  target.metrics["train"] = &resumed_metrics;
  rankwise::checkpoint::restore(checkpoint, target);
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
  const auto saved = rankwise::checkpoint::rng_state();
  const auto first = torch::rand({5});
  torch::manual_seed(99);
  rankwise::checkpoint::set_rng_state(saved);
  EXPECT_TRUE(torch::equal(torch::rand({5}), first));
  EXPECT_EQ(saved.toGenericDict().at("cpu").toTensor().numel(), 5056);
  EXPECT_THROW(rankwise::checkpoint::set_rng_state(c10::IValue(int64_t{3})), rankwise::CheckpointError);
}

// A GPU run resumed where fewer GPUs are visible (here: none, or one fewer
// than saved) restores the CPU state and the GPUs it sees, and says what it
// dropped, instead of refusing the checkpoint.
TEST(TrainingState, RngStatesOfMoreGpusThanVisibleAreDropped) {
  torch::manual_seed(5);
  auto saved = rankwise::checkpoint::rng_state().toGenericDict();
  const auto first = torch::rand({3});
  auto cuda = saved.at("cuda").toList();
  cuda.push_back(torch::zeros({16}, torch::kUInt8));  // a device this process does not see
  saved.insert_or_assign("cuda", cuda);
  torch::manual_seed(6);
  testing::internal::CaptureStderr();
  rankwise::checkpoint::set_rng_state(c10::IValue(saved));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(torch::equal(torch::rand({3}), first));
  EXPECT_NE(err.find("dropped the rest"), std::string::npos) << err;
}

TEST(TrainingState, WrongCheckpointsAreNamed) {
  Net net;
  rankwise::checkpoint::TrainingState target;
  target.model = &net;
  rankwise::checkpoint::Checkpoint plain;
  plain.insert("model", int64_t{1});
  try {
    rankwise::checkpoint::restore(plain, target);
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a training state"), std::string::npos) << e.what();
  }
  rankwise::checkpoint::TrainingState source;
  source.model = &net;
  source.step = 40;
  auto checkpoint = rankwise::checkpoint::capture(source);
  checkpoint.insert("world_size", int64_t{4});
  checkpoint.insert("position", int64_t{128});  // mid-epoch: per-rank states are remapped
  try {
    rankwise::checkpoint::restore(checkpoint, target);  // but it holds 1 per-rank state, not 4
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'rank_states' is not a list of 4 per-rank states"),
              std::string::npos)
        << e.what();
  }
  checkpoint.insert("epoch_stretches", int64_t{3});
  try {
    rankwise::checkpoint::restore(checkpoint, target);
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'epoch_stretches' is not a list"), std::string::npos)
        << e.what();
  }
  checkpoint.insert("epoch_stretches", c10::impl::GenericList(c10::AnyType::get()));
  // At an epoch end, another world size is fine (per-rank states are not restored).
  checkpoint.insert("position", int64_t{0});
  checkpoint.insert("rank_states", c10::List<c10::IValue>(c10::AnyType::get()));  // 4 entries in reality
  rankwise::checkpoint::restore(checkpoint, target);
  EXPECT_EQ(target.step, 40);
  // A checkpoint of another model: the error lists the keys.
  struct Other : torch::nn::Module {
    Other() { register_module("head", torch::nn::Linear(2, 2)); }
  } other;
  rankwise::checkpoint::TrainingState other_source;
  other_source.model = &other;
  try {
    rankwise::checkpoint::restore(rankwise::checkpoint::capture(other_source), target);
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("fc.weight"), std::string::npos) << text;
    EXPECT_NE(text.find("head.weight"), std::string::npos) << text;
  }
}

// A checkpoint taken mid-epoch by 4 ranks, restored by a run of another world
// size (here 1): the epoch goes on from what the 4 ranks left, the metric
// states of all 4 are merged, and rank 0 takes old rank 0's RNG.
TEST(TrainingState, MidEpochAtAnotherWorldSizeFollowsTheWorldSize) {
  Net net;
  rankwise::metrics::MetricCollection metrics;
  auto mean = metrics.add("m", std::make_shared<rankwise::metrics::Mean>());
  auto biggest = metrics.add("max", std::make_shared<rankwise::metrics::Max>());
  rankwise::checkpoint::TrainingState source;
  source.model = &net;
  source.metrics["epoch"] = &metrics;
  auto checkpoint = rankwise::checkpoint::capture(source);

  // Four old ranks: rank r saw the values r+1 and 10*(r+1); its RNG was seeded 100 + r.
  c10::impl::GenericList rank_states(c10::AnyType::get());
  for (int r = 0; r < 4; ++r) {
    metrics.reset();
    mean->update(torch::tensor({1.0 + r, 10.0 * (1 + r)}, torch::kFloat64));
    biggest->update(torch::tensor({1.0 + r, 10.0 * (1 + r)}, torch::kFloat64));
    torch::manual_seed(100 + r);
    c10::impl::GenericDict saved_metrics(c10::StringType::get(), c10::AnyType::get());
    saved_metrics.insert("epoch", metrics.state());
    c10::impl::GenericDict rank_state(c10::StringType::get(), c10::AnyType::get());
    rank_state.insert("rng", rankwise::checkpoint::rng_state());
    rank_state.insert("metrics", saved_metrics);
    rank_states.push_back(rank_state);
  }
  checkpoint.insert("rank_states", rank_states);
  checkpoint.insert("world_size", int64_t{4});
  checkpoint.insert("position", int64_t{5});
  // The epoch had begun at 6 ranks, 3 samples each, before these 4 took over.
  c10::impl::GenericList stretches(c10::DictType::create(c10::StringType::get(), c10::IntType::get()));
  c10::Dict<std::string, int64_t> first;
  first.insert("world_size", 6);
  first.insert("position", 3);
  stretches.push_back(first);
  checkpoint.insert("epoch_stretches", stretches);

  metrics.reset();
  torch::manual_seed(999);
  rankwise::checkpoint::TrainingState target;
  target.model = &net;
  target.metrics["epoch"] = &metrics;
  rankwise::checkpoint::restore(checkpoint, target);

  EXPECT_EQ(target.position, 0);
  ASSERT_EQ(target.epoch_stretches.size(), 2u);
  EXPECT_EQ(target.epoch_stretches[0].num_replicas, 6);
  EXPECT_EQ(target.epoch_stretches[0].per_rank, 3);
  EXPECT_EQ(target.epoch_stretches[1].num_replicas, 4);
  EXPECT_EQ(target.epoch_stretches[1].per_rank, 5);
  // Mean of 1..4 and 10..40: (10 + 100) / 8; the maximum 40.
  auto values = metrics.compute();
  EXPECT_DOUBLE_EQ(values["m"].item<double>(), 110.0 / 8.0);
  EXPECT_DOUBLE_EQ(values["max"].item<double>(), 40.0);
  const auto drawn = torch::rand({4});
  torch::manual_seed(100);  // old rank 0's generator
  EXPECT_TRUE(torch::equal(drawn, torch::rand({4})));

  // Captured again (now at world size 1), the stretches travel on: a third
  // run at yet another world size resumes after both.
  target.position = 2;
  auto again = rankwise::checkpoint::capture(target);
  rankwise::checkpoint::TrainingState third;
  third.model = &net;
  rankwise::checkpoint::restore(again, third);
  ASSERT_EQ(third.epoch_stretches.size(), 2u);
  EXPECT_EQ(third.position, 2);  // the same world size: the position as saved
}

TEST(MetricCollection, MergeStatesCombinesEachStateByItsReduction) {
  rankwise::metrics::MetricCollection metrics;
  auto mean = metrics.add("m", std::make_shared<rankwise::metrics::Mean>());
  auto low = metrics.add("min", std::make_shared<rankwise::metrics::Min>());
  std::vector<c10::Dict<std::string, torch::Tensor>> parts;
  for (double v : {3.0, -2.0, 5.0}) {
    metrics.reset();
    mean->update(torch::tensor({v}, torch::kFloat64));
    low->update(torch::tensor({v}, torch::kFloat64));
    parts.push_back(metrics.state());
  }
  metrics.load_state(metrics.merge_states(parts));
  auto values = metrics.compute();
  EXPECT_DOUBLE_EQ(values["m"].item<double>(), 2.0);
  EXPECT_DOUBLE_EQ(values["min"].item<double>(), -2.0);
  // A part from another collection is named.
  parts[1].insert("other.x", torch::zeros({1}));
  try {
    metrics.merge_states(parts);
    FAIL();
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'other.x' belongs to no metric"), std::string::npos)
        << e.what();
  }
}
