// rankwise-test-nproc: 2 3
// DistributedDataParallel on models whose used parameters change: from step
// to step, from rank to rank, or fixed under static_graph. 50 steps; the
// replicas must stay bitwise equal and equal a single process trained on
// the union of the ranks' batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

#include "ddp_test_support.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/dist/process_group.h"

namespace {

using ddp_test::batch_of;
using ddp_test::flat_parameters;
using ddp_test::max_abs_diff;

constexpr int kBranches = 3;
constexpr int kNone = -1;  // skip no branch
constexpr int kSteps = 50;

// A trunk and three heads summed; forward(x, skip) leaves out head `skip`,
// whose parameters then get no gradient on this rank in this step.
struct BranchesImpl : torch::nn::Module {
  BranchesImpl() : trunk(register_module("trunk", torch::nn::Linear(5, 8))) {
    for (int i = 0; i < kBranches; ++i) {
      heads.push_back(register_module("head" + std::to_string(i), torch::nn::Linear(8, 3)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x, int skip) {
    auto h = torch::tanh(trunk(x));
    torch::Tensor out;
    for (int i = 0; i < kBranches; ++i) {
      if (i == skip) continue;
      out = out.defined() ? out + heads[i](h) : heads[i](h);
    }
    return out;
  }
  torch::nn::Linear trunk;
  std::vector<torch::nn::Linear> heads;
};
TORCH_MODULE(Branches);

// Which head rank r leaves out at step `step`.
using SkipRule = std::function<int(int rank, int step)>;

struct Case {
  std::string name;
  rankwise::parallel::DistributedDataParallelOptions options;
  SkipRule skip;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

torch::optim::SGDOptions sgd() { return torch::optim::SGDOptions(0.05).momentum(0.9); }

// One process: each step's loss is the mean over ranks r of rank r's loss
// (its batch through its heads), i.e. the mean over the union of the
// batches (equal sizes), the loss scaling DDP's averaged gradients give.
// `ranks` = {r} alone gives what rank r would learn without DDP.
torch::Tensor reference(const SkipRule& skip, const std::vector<int>& ranks) {
  torch::manual_seed(0);
  Branches model;
  torch::optim::SGD opt(model->parameters(), sgd());
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (int r : ranks) {
      auto [x, y] = batch_of(r, step);
      loss = loss + torch::mse_loss(model->forward(x, skip(r, step)), y);
    }
    (loss / static_cast<double>(ranks.size())).backward();
    opt.step();
  }
  return flat_parameters(*model);
}

class DdpUnused : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
  }
};

TEST_P(DdpUnused, ReplicasEqualAndMatchSingleProcessOverUnion) {
  const Case& c = GetParam();
  const int rank = rankwise::dist::rank();
  const int world = rankwise::dist::world_size();
  torch::manual_seed(0);
  Branches model;
  rankwise::parallel::DistributedDataParallel ddp(model, c.options);
  torch::optim::SGD opt(ddp.parameters(), sgd());
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch_of(rank, step);
    opt.zero_grad();
    torch::mse_loss(ddp.forward(x, c.skip(rank, step)), y).backward();
    opt.step();
  }
  ddp.join();
  auto mine = flat_parameters(*ddp.module());
  auto all = rankwise::dist::all_gather(mine);
  for (int r = 0; r < world; ++r) EXPECT_TRUE(all[r].equal(mine)) << "rank " << r << " differs";

  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  auto expected = reference(c.skip, ranks);
  EXPECT_LT(max_abs_diff(mine, expected), 1e-5f);
  // The comparison can fail: this rank's batches alone give other parameters.
  EXPECT_GT(max_abs_diff(reference(c.skip, {rank}), expected), 1e-3f);
}

using Options = rankwise::parallel::DistributedDataParallelOptions;

INSTANTIATE_TEST_SUITE_P(
    Ddp, DdpUnused,
    ::testing::Values(
        // Head 2 takes part on odd steps only: the unused set changes every step.
        Case{"FindUnusedBranchOnOddStepsOnly", Options().find_unused_parameters(true),
             [](int, int step) { return step % 2 == 1 ? kNone : 2; }},
        // Each rank leaves out another head, and the head changes every step.
        Case{"FindUnusedBranchDiffersPerRank", Options().find_unused_parameters(true),
             [](int rank, int step) { return (rank + step) % kBranches; }},
        // static_graph: each rank always leaves out the same head (its own).
        Case{"StaticGraphUnusedBranchPerRank", Options().static_graph(true),
             [](int rank, int) { return rank % kBranches; }},
        Case{"StaticGraphWithFindUnusedBranchPerRank",
             Options().static_graph(true).find_unused_parameters(true),
             [](int rank, int) { return rank % kBranches; }},
        Case{"StaticGraphEveryParameterUsed", Options().static_graph(true),
             [](int, int) { return kNone; }}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
