// rankwise-test-nproc: 2
//
// GradScaler across ranks: when only rank 1's gradient holds an inf, both
// ranks skip that step and back off the same way (the found-inf flag is
// all_reduced), with a torch optimizer and with ZeroRedundancyOptimizer
// (whose step() is collective: a rank stepping alone would hang). Without a
// group (nullptr) each rank decides alone, which is what the all_reduce fixes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <limits>
#include <memory>
#include <vector>

#include "rankwise/amp/grad_scaler.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"

namespace {

using rankwise::amp::GradScaler;
using rankwise::amp::GradScalerOptions;

rankwise::dist::ProcessGroup& group() {
  return rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
}

const auto kOptions = GradScalerOptions().init_scale(1024.0).growth_interval(2);

std::vector<torch::Tensor> parameters() {
  return {torch::full({3}, 0.5f).requires_grad_(), torch::full({2}, -1.0f).requires_grad_()};
}

// The same loss on every rank; on `bad_step`, rank 1's first gradient gets an inf.
template <typename Optimizer>
void backward(GradScaler& scaler, Optimizer& optimizer, std::vector<torch::Tensor>& params,
              int step, int bad_step) {
  optimizer.zero_grad();
  const auto loss = (params[0] * (step + 1)).pow(2).sum() + params[1].sum();
  scaler.scale(loss).backward();
  if (step == bad_step && group().rank() == 1) {
    torch::NoGradGuard no_grad;
    params[0].mutable_grad()[0] = std::numeric_limits<float>::infinity();
  }
}

struct Trace {
  std::vector<int> stepped;  // 1 where optimizer.step() ran
  std::vector<double> scale;
};

// Every rank's trace, gathered (rank r's at entry r).
std::vector<torch::Tensor> gathered(const Trace& trace) {
  std::vector<double> flat(trace.scale);
  flat.insert(flat.end(), trace.stepped.begin(), trace.stepped.end());
  return group().all_gather(torch::tensor(flat, torch::kDouble));
}

template <typename Optimizer>
Trace train(GradScaler& scaler, Optimizer& optimizer, std::vector<torch::Tensor>& params) {
  Trace trace;
  for (int step = 0; step < 4; ++step) {
    backward(scaler, optimizer, params, step, /*bad_step=*/1);
    trace.stepped.push_back(scaler.step(optimizer) ? 1 : 0);
    scaler.update();
    trace.scale.push_back(scaler.get_scale());
  }
  return trace;
}

}  // namespace

TEST(GradScaler, EveryRankSkipsTheStepOnlyRankOneSawAnInfIn) {
  ASSERT_EQ(group().world_size(), 2);
  auto params = parameters();
  torch::optim::SGD optimizer(params, 0.01);
  GradScaler scaler(kOptions);  // the default: the global group
  const auto trace = train(scaler, optimizer, params);
  // step 0 clean, 1 skipped (backoff to 512, count restarts), 2 clean, 3 clean: grows to 1024
  EXPECT_EQ(trace.stepped, (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(trace.scale, (std::vector<double>{1024.0, 512.0, 512.0, 1024.0}));
  const auto all = gathered(trace);
  EXPECT_TRUE(torch::equal(all[0], all[1])) << all[0] << all[1];
  // The same steps taken on the same gradients: the replicas stay equal.
  for (const auto& p : params) {
    const auto replicas = group().all_gather(p.detach());
    EXPECT_TRUE(torch::equal(replicas[0], replicas[1]));
  }
}

TEST(GradScaler, AnExplicitGroupDoesTheSame) {
  auto params = parameters();
  torch::optim::SGD optimizer(params, 0.01);
  GradScaler scaler(kOptions, &group());
  const auto trace = train(scaler, optimizer, params);
  EXPECT_EQ(trace.stepped, (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(trace.scale, (std::vector<double>{1024.0, 512.0, 512.0, 1024.0}));
}

TEST(GradScaler, WithoutAGroupEachRankDecidesAlone) {
  auto params = parameters();
  torch::optim::SGD optimizer(params, 0.01);
  GradScaler scaler(kOptions, nullptr);
  const auto trace = train(scaler, optimizer, params);
  if (group().rank() == 1) {
    EXPECT_EQ(trace.stepped, (std::vector<int>{1, 0, 1, 1}));
    EXPECT_EQ(trace.scale, (std::vector<double>{1024.0, 512.0, 512.0, 1024.0}));
  } else {
    // clean throughout: grows after steps 1 and 3
    EXPECT_EQ(trace.stepped, (std::vector<int>{1, 1, 1, 1}));
    EXPECT_EQ(trace.scale, (std::vector<double>{1024.0, 2048.0, 2048.0, 4096.0}));
  }
}

TEST(GradScaler, ZeroRedundancyOptimizerSkipsOnEveryRank) {
  auto params = parameters();
  rankwise::parallel::ZeroRedundancyOptimizer optimizer(params, [](auto groups) {
    return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.01));
  });
  GradScaler scaler(kOptions);
  const auto trace = train(scaler, optimizer, params);
  EXPECT_EQ(trace.stepped, (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(trace.scale, (std::vector<double>{1024.0, 512.0, 512.0, 1024.0}));
  for (const auto& p : params) {
    const auto replicas = group().all_gather(p.detach());
    EXPECT_TRUE(torch::equal(replicas[0], replicas[1]));
  }
}
