// DistributedDataParallel on 2 ranks: replicas stay bitwise equal and a step
// equals a single-process step over the union of the ranks' batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rankwise/ddp.h"
#include "rankwise/process_group.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(5, 8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

torch::Tensor flat_parameters(torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

// Batch of rank r: 4 samples from its own seed.
std::pair<torch::Tensor, torch::Tensor> batch_of(int r, int step = 0) {
  torch::manual_seed(100 + 10 * r + step);
  return {torch::randn({4, 5}), torch::randn({4, 3})};
}

}  // namespace

class Ddp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { rankwise::init(); }
  int rank = rankwise::rank();
  int world = rankwise::world_size();
};

TEST_F(Ddp, ConstructionBroadcastsRankZeroWeights) {
  torch::manual_seed(rank);  // different on purpose
  Net net;
  Net rank0_copy;
  {
    torch::manual_seed(0);
    Net reference;
    rank0_copy = reference;
  }
  rankwise::DistributedDataParallel ddp(net);
  EXPECT_TRUE(flat_parameters(*ddp.module()).equal(flat_parameters(*rank0_copy)));
}

TEST_F(Ddp, OneStepEqualsSingleProcessStepOverUnion) {
  ASSERT_EQ(world, 2);
  torch::manual_seed(0);
  Net net;
  rankwise::DistributedDataParallel ddp(net);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch_of(rank, step);
    opt.zero_grad();
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
  }
  // Bitwise equal on every rank.
  auto mine = flat_parameters(*ddp.module());
  auto all = rankwise::all_gather(mine);
  for (int r = 0; r < world; ++r) EXPECT_TRUE(all[r].equal(mine)) << "rank " << r << " differs";

  // Single process, batch = union of both ranks' batches (equal sizes, so the
  // mean of per-rank means is the mean over the union).
  torch::manual_seed(0);
  Net single;
  torch::optim::SGD single_opt(single->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    auto [x0, y0] = batch_of(0, step);
    auto [x1, y1] = batch_of(1, step);
    single_opt.zero_grad();
    torch::mse_loss(single->forward(torch::cat({x0, x1})), torch::cat({y0, y1})).backward();
    single_opt.step();
  }
  auto expected = flat_parameters(*single);
  EXPECT_LT((mine - expected).abs().max().item<float>(), 1e-6f);
  // And it is not trivially equal to training on this rank's data alone.
  EXPECT_GT((mine - expected).abs().max().item<float>() + 1.0f, 1.0f - 1e-6f);
}

TEST_F(Ddp, NoSyncAccumulatesThenAverages) {
  torch::manual_seed(0);
  Net net;
  rankwise::DistributedDataParallel ddp(net);
  auto [xa, ya] = batch_of(rank, 0);
  auto [xb, yb] = batch_of(rank, 1);
  {
    auto guard = ddp.no_sync();
    torch::mse_loss(ddp.forward(xa), ya).backward();
  }
  // Inside no_sync nothing was communicated: gradients still differ by rank.
  auto local_grad = ddp.module()->fc1->weight.grad().clone();
  auto gathered = rankwise::all_gather(local_grad);
  EXPECT_FALSE(gathered[0].equal(gathered[1]));
  torch::mse_loss(ddp.forward(xb), yb).backward();  // synced: averages the accumulated sum
  auto synced = rankwise::all_gather(ddp.module()->fc1->weight.grad().clone());
  EXPECT_TRUE(synced[0].equal(synced[1]));

  torch::manual_seed(0);
  Net single;
  for (int r = 0; r < world; ++r) {
    auto [x0, y0] = batch_of(r, 0);
    auto [x1, y1] = batch_of(r, 1);
    (torch::mse_loss(single->forward(x0), y0) / world).backward();
    (torch::mse_loss(single->forward(x1), y1) / world).backward();
  }
  EXPECT_LT((synced[0] - single->fc1->weight.grad()).abs().max().item<float>(), 1e-6f);
}

TEST_F(Ddp, BuffersFollowRankZero) {
  torch::manual_seed(0);
  torch::nn::BatchNorm1d bn(3);
  rankwise::DistributedDataParallel ddp(bn);
  torch::manual_seed(rank + 7);
  ddp.forward(torch::randn({6, 3}) + 5.0 * rank);  // local statistics differ by rank
  auto after_first = rankwise::all_gather(ddp.module()->running_mean.clone());
  ASSERT_FALSE(after_first[0].equal(after_first[1]));
  // Before the next forward rank 0's buffers are broadcast; an all-zero batch
  // (mean 0) then gives running_mean = (1 - 0.1) * rank 0's running_mean.
  ddp.forward(torch::zeros({6, 3}));
  auto expected = after_first[0] * 0.9;
  EXPECT_LT((ddp.module()->running_mean - expected).abs().max().item<float>(), 1e-6f);
  auto after_second = rankwise::all_gather(ddp.module()->running_mean.clone());
  EXPECT_TRUE(after_second[0].equal(after_second[1]));
}
