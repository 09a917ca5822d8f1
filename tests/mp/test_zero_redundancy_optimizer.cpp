// rankwise-test-nproc: 2 3
// ZeroRedundancyOptimizer (ZeRO stage 1) on 2 and 3 ranks: steps equal to
// plain DDP with the same optimizer, replicas bitwise equal, optimizer state
// ~1/world_size per rank, clear errors. The partition rule is checked
// against PyTorch in tests/unit/parallel/zero_redundancy_optimizer_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddp_test_support.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"

namespace {

using ddp_test::batch_of;
using ddp_test::flat_parameters;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(5, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 8))),
        fc3(register_module("fc3", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Net);

// `steps` steps of DDP on each rank's own batches.
template <typename Ddp, typename Opt>
void train(Ddp& ddp, Opt& opt, int steps) {
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch_of(rankwise::dist::rank(), step);
    opt.zero_grad();
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
  }
}

std::vector<torch::optim::OptimizerParamGroup> decay_and_no_decay(torch::nn::Module& m) {
  // Weight decay on the weights, none on the biases (a common recipe).
  std::vector<torch::Tensor> weights, biases;
  for (const auto& item : m.named_parameters()) {
    (item.key().find("bias") != std::string::npos ? biases : weights).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(weights, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
  groups.emplace_back(biases, std::make_unique<torch::optim::AdamWOptions>(
                                  torch::optim::AdamWOptions(0.01).weight_decay(0.0)));
  return groups;
}

TEST(ZeroRedundancyOptimizer, AdamStepsEqualPlainDdpAndReplicasStayBitwiseEqual) {
  constexpr int kSteps = 50;
  torch::manual_seed(0);
  Net plain_net;
  rankwise::parallel::DistributedDataParallel plain(plain_net);
  torch::optim::Adam plain_opt(plain.parameters(), torch::optim::AdamOptions(0.01));
  train(plain, plain_opt, kSteps);

  torch::manual_seed(0);
  Net zero_net;
  rankwise::parallel::DistributedDataParallel ddp(zero_net);
  rankwise::parallel::ZeroRedundancyOptimizer zero(ddp.parameters(), [](auto groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups),
                                                torch::optim::AdamOptions(0.01));
  });
  ASSERT_TRUE(zero.has_local_optimizer());
  train(ddp, zero, kSteps);

  const torch::Tensor mine = flat_parameters(*ddp.module());
  EXPECT_LE(ddp_test::max_abs_diff(mine, flat_parameters(*plain.module())), 1e-6);
  const auto all = rankwise::dist::all_gather(mine);
  for (int r = 0; r < rankwise::dist::world_size(); ++r) {
    EXPECT_TRUE(all[r].equal(mine)) << "rank " << r << "'s replica differs";
  }
  // The parameters moved: the comparison is not of two untouched models.
  torch::manual_seed(0);
  Net initial;
  EXPECT_GT(ddp_test::max_abs_diff(mine, flat_parameters(*initial)), 1e-3);
}

TEST(ZeroRedundancyOptimizer, ParameterGroupsKeepTheirOptions) {
  constexpr int kSteps = 20;
  torch::manual_seed(1);
  Net plain_net;
  rankwise::parallel::DistributedDataParallel plain(plain_net);
  torch::optim::AdamW plain_opt(decay_and_no_decay(*plain.module()),
                                torch::optim::AdamWOptions(0.5));
  train(plain, plain_opt, kSteps);

  torch::manual_seed(1);
  Net zero_net;
  rankwise::parallel::DistributedDataParallel ddp(zero_net);
  rankwise::parallel::ZeroRedundancyOptimizer zero(decay_and_no_decay(*ddp.module()), [](auto groups) {
    return std::make_unique<torch::optim::AdamW>(std::move(groups),
                                                 torch::optim::AdamWOptions(0.5));
  });
  train(ddp, zero, kSteps);
  EXPECT_LE(ddp_test::max_abs_diff(flat_parameters(*ddp.module()),
                                   flat_parameters(*plain.module())),
            1e-6);
  // Each local group carries its own group's options, not the defaults (0.5).
  for (const auto& group : zero.local_optimizer().param_groups()) {
    EXPECT_EQ(group.options().get_lr(), 0.01);
  }
}

TEST(ZeroRedundancyOptimizer, EachRankHoldsItsShareOfTheState) {
  // 12 parameters of different sizes; Adam's state is 2 tensors per parameter.
  torch::manual_seed(2);
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 12; ++i) params.push_back(torch::randn({(i % 4 + 1) * 100}).requires_grad_());
  const int world = rankwise::dist::world_size();
  rankwise::parallel::ZeroRedundancyOptimizer zero(params, [](auto groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(0.1));
  });
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  zero.step();

  torch::optim::Adam whole(params, torch::optim::AdamOptions(0.1));
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  whole.step();
  int64_t whole_bytes = 0;
  for (const auto& p : params) whole_bytes += 2 * p.numel() * 4;  // exp_avg, exp_avg_sq

  const int64_t mine = zero.local_state_bytes();
  auto all = rankwise::dist::all_gather(torch::tensor({mine}, torch::kInt64));
  int64_t sum = 0;
  for (const auto& t : all) sum += t.item<int64_t>();
  // Each rank's step counters (one float32 per parameter) come on top.
  EXPECT_EQ(sum, whole_bytes + 12 * 4);
  // Balanced to within one largest parameter (400 elements: 3,200 bytes of
  // state), as the greedy rule guarantees.
  EXPECT_LE(mine, whole_bytes / world + 3200 + 12 * 4) << "rank " << rankwise::dist::rank();
  if (rankwise::dist::rank() == 0) {
    std::printf("ZeroRedundancyOptimizer: optimizer state %lld bytes on this rank of %lld "
                "unsharded (%.2f; 1/world size = %.2f)\n",
                static_cast<long long>(mine), static_cast<long long>(whole_bytes),
                static_cast<double>(mine) / static_cast<double>(whole_bytes), 1.0 / world);
  }
  // Every rank holds state only for the parameters it owns.
  EXPECT_EQ(zero.local_optimizer().param_groups().at(0).params().size(),
            zero.owned_by(rankwise::dist::rank()).size());
}

TEST(ZeroRedundancyOptimizer, MixedDtypesAndUnusedParametersAreBroadcast) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> params = {torch::randn({30}).requires_grad_(),
                                       torch::randn({20}, torch::kFloat64).requires_grad_(),
                                       torch::randn({10}).requires_grad_(),
                                       torch::randn({5}, torch::kFloat64).requires_grad_()};
  rankwise::parallel::ZeroRedundancyOptimizer zero(params, [](auto groups) {
    return std::make_unique<torch::optim::SGD>(std::move(groups),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  });
  const std::vector<torch::Tensor> before = {params[0].clone(), params[1].clone(),
                                             params[2].clone(), params[3].clone()};
  for (int step = 0; step < 3; ++step) {
    zero.zero_grad();
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (i == 2) continue;  // parameter 2 gets no gradient: left unchanged
      params[i].mutable_grad() = torch::full_like(params[i], 1.0 + static_cast<double>(i));
    }
    zero.step();
  }
  EXPECT_TRUE(params[2].equal(before[2]));
  for (std::size_t i : {0u, 1u, 3u}) {
    // SGD with momentum 0.9, lr 0.1, constant gradient g: 0.1 g (1 + 1.9 + 2.71).
    const double g = 1.0 + static_cast<double>(i);
    const auto expected = before[i] - 0.1 * g * (1.0 + 1.9 + 2.71);
    EXPECT_TRUE(torch::allclose(params[i], expected, 1e-5, 1e-6)) << "parameter " << i;
    EXPECT_EQ(params[i].scalar_type(), before[i].scalar_type());
    for (const auto& other : rankwise::dist::all_gather(params[i].detach())) {
      EXPECT_TRUE(other.equal(params[i])) << "parameter " << i;
    }
  }
}

TEST(ZeroRedundancyOptimizer, BadInputIsNamed) {
  const auto adam = [](auto groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions());
  };
  EXPECT_THROW(rankwise::parallel::ZeroRedundancyOptimizer(std::vector<torch::Tensor>{}, adam),
               rankwise::ConfigError);
  const torch::Tensor p = torch::zeros({3}).requires_grad_();
  try {
    rankwise::parallel::ZeroRedundancyOptimizer twice(std::vector<torch::Tensor>{p, p}, adam);
    ADD_FAILURE() << "a parameter given twice was accepted";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 1 (group 0) is given twice"),
              std::string::npos)
        << e.what();
  }
  // Ranks with different parameters: every rank is told (an all_gather).
  const int n = rankwise::dist::rank() == 0 ? 4 : 3;
  try {
    rankwise::parallel::ZeroRedundancyOptimizer differ(std::vector<torch::Tensor>{torch::zeros({n})}, adam);
    ADD_FAILURE() << "different parameters on the ranks were accepted";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("construct it on every rank with the same parameters"),
              std::string::npos)
        << e.what();
  }
  // More ranks than parameters: a rank without a share has no local optimizer.
  rankwise::parallel::ZeroRedundancyOptimizer one(std::vector<torch::Tensor>{p}, adam);
  EXPECT_EQ(one.has_local_optimizer(), rankwise::dist::rank() == 0);
  if (rankwise::dist::rank() != 0) {
    EXPECT_THROW(one.local_optimizer(), rankwise::ConfigError);
  }
}

// A state_dict that does not fit: the owner of the parameter says so, naming
// itself and the parameter as the whole optimizer's state_dict numbers it
// (not its index in the rank's own share); the other ranks load their share.
TEST(ZeroRedundancyOptimizer, LoadStateDictErrorsNameTheRankAndTheParameter) {
  torch::manual_seed(0);
  Net net;
  auto ddp = rankwise::parallel::DistributedDataParallel(net);
  rankwise::parallel::ZeroRedundancyOptimizer zero(ddp.parameters(), [](auto groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(0.01));
  });
  train(ddp, zero, 2);
  const c10::IValue full = zero.state_dict();  // collective
  const std::size_t last = 4;                  // fc3.weight, of shape [3, 8]
  int owner = -1;
  for (int r = 0; r < rankwise::dist::world_size(); ++r) {
    for (std::size_t i : zero.owned_by(r)) owner = i == last ? r : owner;
  }
  ASSERT_GT(owner, 0) << "the test wants the parameter owned by a rank other than 0";
  auto bad = full.toGenericDict().copy();
  auto state = bad.at("state").toGenericDict().copy();
  auto param_state = state.at(static_cast<int64_t>(last)).toGenericDict().copy();
  param_state.insert_or_assign("exp_avg", torch::zeros({2}));
  state.insert_or_assign(static_cast<int64_t>(last), param_state);
  bad.insert_or_assign("state", state);
  if (rankwise::dist::rank() != owner) {
    EXPECT_NO_THROW(zero.load_state_dict(bad));
    return;
  }
  try {
    zero.load_state_dict(bad);
    ADD_FAILURE() << "a state of the wrong shape was accepted";
  } catch (const rankwise::CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("on rank " + std::to_string(owner)), std::string::npos) << what;
    EXPECT_NE(what.find("state[4]"), std::string::npos) << what;
    EXPECT_NE(what.find("'exp_avg' has shape [2]"), std::string::npos) << what;
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  rankwise::dist::init();
  return RUN_ALL_TESTS();
}
