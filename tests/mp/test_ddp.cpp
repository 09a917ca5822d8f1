// rankwise-test-part: pytorch2 Ddp.BucketsMatchPyTorch2sOwn
// DistributedDataParallel on 2 ranks (c10d Reducer): replicas stay bitwise
// equal, steps equal a single-process step over the union of the ranks'
// batches, buffers follow rank 0, unused parameters and uneven inputs are
// named instead of hanging.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "rankwise/parallel/ddp.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"
#include "ddp_test_support.h"
#include "support/shell.h"

namespace {

using ddp_test::batch_of;
using ddp_test::flat_parameters;
using ddp_test::train;
using ddp_test::max_abs_diff;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(5, 8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 3))),
        spare(register_module("spare", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::tanh(fc1(x));
    if (!use_spare) return fc2(h);
    // In this order, as Python's fc2(h) + spare(h) evaluates them (C++ may
    // evaluate an operator's operands in either order): autograd then runs
    // spare's backward first, which decides the order of the rebuilt buckets.
    auto out = fc2(h);
    return out + spare(h);
  }
  torch::nn::Linear fc1, fc2, spare;
  bool use_spare = true;
};
TORCH_MODULE(Net);


template <typename Optimizer, typename Options>
void expect_equivalent_to_single_process(const Options& options, int steps, bool accumulate) {
  const int world = rankwise::dist::world_size();
  const int rank = rankwise::dist::rank();
  torch::manual_seed(0);
  Net net;
  rankwise::parallel::DistributedDataParallel ddp(net);
  Optimizer opt(ddp.parameters(), options);
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    if (accumulate) {  // 2 micro-batches of 2, the first without communication
      auto [x, y] = batch_of(rank, step);
      {
        auto guard = ddp.no_sync();
        (torch::mse_loss(ddp.forward(x.narrow(0, 0, 2)), y.narrow(0, 0, 2)) / 2).backward();
      }
      (torch::mse_loss(ddp.forward(x.narrow(0, 2, 2)), y.narrow(0, 2, 2)) / 2).backward();
    } else {
      auto [x, y] = batch_of(rank, step);
      torch::mse_loss(ddp.forward(x), y).backward();
    }
    opt.step();
  }
  auto mine = flat_parameters(*ddp.module());
  auto all = rankwise::dist::all_gather(mine);
  for (int r = 0; r < world; ++r) EXPECT_TRUE(all[r].equal(mine)) << "rank " << r << " differs";

  // One process, batch = the union of every rank's batch (equal sizes, so the
  // mean of the per-rank means is the mean over the union).
  torch::manual_seed(0);
  Net single;
  Optimizer single_opt(single->parameters(), options);
  for (int step = 0; step < steps; ++step) {
    std::vector<torch::Tensor> xs, ys;
    for (int r = 0; r < world; ++r) {
      auto [x, y] = batch_of(r, step);
      xs.push_back(x);
      ys.push_back(y);
    }
    single_opt.zero_grad();
    torch::mse_loss(single->forward(torch::cat(xs)), torch::cat(ys)).backward();
    single_opt.step();
  }
  auto expected = flat_parameters(*single);
  EXPECT_LT(max_abs_diff(mine, expected), 1e-5f);
  // The comparison can fail: one rank's data alone gives other parameters.
  torch::manual_seed(0);
  Net local_only;
  Optimizer local_opt(local_only->parameters(), options);
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch_of(rank, step);
    local_opt.zero_grad();
    torch::mse_loss(local_only->forward(x), y).backward();
    local_opt.step();
  }
  EXPECT_GT(max_abs_diff(flat_parameters(*local_only), expected), 1e-3f);
}

}  // namespace

class Ddp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(30)));
  }
  int rank = rankwise::dist::rank();
  int world = rankwise::dist::world_size();
};

TEST_F(Ddp, ConstructionBroadcastsRankZeroWeights) {
  torch::manual_seed(0);
  Net rank0_copy;
  torch::manual_seed(rank);  // different on purpose
  Net net;
  rankwise::parallel::DistributedDataParallel ddp(net);
  EXPECT_TRUE(flat_parameters(*ddp.module()).equal(flat_parameters(*rank0_copy)));
}

TEST_F(Ddp, SgdMomentumEqualsSingleProcessOverUnion) {
  expect_equivalent_to_single_process<torch::optim::SGD>(
      torch::optim::SGDOptions(0.1).momentum(0.9), 5, false);
}

TEST_F(Ddp, AdamEqualsSingleProcessOverUnion) {
  expect_equivalent_to_single_process<torch::optim::Adam>(torch::optim::AdamOptions(0.01), 5,
                                                          false);
}

TEST_F(Ddp, NoSyncAccumulationEqualsSingleProcessOverUnion) {
  expect_equivalent_to_single_process<torch::optim::SGD>(
      torch::optim::SGDOptions(0.1).momentum(0.9), 4, true);
}

TEST_F(Ddp, NoSyncCommunicatesNothing) {
  torch::manual_seed(0);
  Net net;
  rankwise::parallel::DistributedDataParallel ddp(net);
  auto [x, y] = batch_of(rank, 0);
  {
    auto guard = ddp.no_sync();
    torch::mse_loss(ddp.forward(x), y).backward();
  }
  auto gathered = rankwise::dist::all_gather(ddp.module()->fc1->weight.grad().clone());
  EXPECT_FALSE(gathered[0].equal(gathered[1]));
}

TEST_F(Ddp, BuffersFollowRankZero) {
  torch::manual_seed(0);
  torch::nn::BatchNorm1d bn(3);
  rankwise::parallel::DistributedDataParallel ddp(bn);
  torch::manual_seed(rank + 7);
  ddp.forward(torch::randn({6, 3}) + 5.0 * rank);  // local statistics differ by rank
  auto after_first = rankwise::dist::all_gather(ddp.module()->running_mean.clone());
  ASSERT_FALSE(after_first[0].equal(after_first[1]));
  // Before the next forward rank 0's buffers are broadcast; an all-zero batch
  // (mean 0) then gives running_mean = (1 - 0.1) * rank 0's running_mean.
  ddp.forward(torch::zeros({6, 3}));
  auto expected = after_first[0] * 0.9;
  EXPECT_LT((ddp.module()->running_mean - expected).abs().max().item<float>(), 1e-6f);
  auto after_second = rankwise::dist::all_gather(ddp.module()->running_mean.clone());
  EXPECT_TRUE(after_second[0].equal(after_second[1]));
}

// `next()` must throw an Error whose text contains every `present`, on one
// line, and none of c10d's advice for Python users or c10's stack trace.
template <typename Next>
void expect_error_text(Next next, std::initializer_list<const char*> present) {
  try {
    next();
    FAIL() << "expected an Error";
  } catch (const rankwise::Error& e) {
    const std::string text = e.what();
    for (const char* p : present) {
      EXPECT_NE(text.find(p), std::string::npos) << "'" << p << "' not in: " << text;
    }
    for (const char* a : {"find_unused_parameters=True", "TORCH_DISTRIBUTED_DEBUG",
                          "torch.nn.parallel", "keyword argument", "set to True", "\n",
                          "frame #"}) {
      EXPECT_EQ(text.find(a), std::string::npos) << "'" << a << "' in: " << text;
    }
  }
}

// One step of a model whose `spare` layer is unused, then `next(ddp, x)`
// must raise an Error naming that layer's parameters.
template <typename Next>
void expect_unused_parameters_named(int r, Next next) {
  torch::manual_seed(0);
  Net net;
  net->use_spare = false;
  rankwise::parallel::DistributedDataParallel ddp(net);
  auto [x, y] = batch_of(r, 0);
  torch::mse_loss(ddp.forward(x), y).backward();
  // c10d's own text is kept ("Expected to ...").
  expect_error_text([&] { next(ddp, x); },
                    {"parameter(s) [spare.weight, spare.bias] received no gradient",
                     "DistributedDataParallelOptions().find_unused_parameters(true)",
                     "Expected to have finished reduction in the prior iteration"});
}

TEST_F(Ddp, UnusedParameterIsNamed) {
  expect_unused_parameters_named(rank, [](auto& ddp, const torch::Tensor& x) { ddp.forward(x); });
}

// Without a next forward to notice it, an unused parameter in the last step
// would leave that step's gradients unreduced and the replicas silently
// apart; join() names it instead.
TEST_F(Ddp, UnusedParameterInTheLastStepIsNamedByJoin) {
  expect_unused_parameters_named(rank, [](auto& ddp, const torch::Tensor&) { ddp.join(); });
  rankwise::dist::barrier();
}

// static_graph(true) promises the same used parameters every step; a step
// that leaves `spare` out is named, with the option to use instead.
TEST_F(Ddp, StaticGraphWhoseUsedParametersChangeIsNamed) {
  torch::manual_seed(0);
  Net net;
  rankwise::parallel::DistributedDataParallel ddp(
      net, rankwise::parallel::DistributedDataParallelOptions().static_graph(true));
  auto [x, y] = batch_of(rank, 0);
  torch::mse_loss(ddp.forward(x), y).backward();  // every parameter used
  net->use_spare = false;
  torch::mse_loss(ddp.forward(x), y).backward();
  expect_error_text([&] { ddp.forward(x); },
                    {"parameter(s) [spare.weight, spare.bias] received no gradient",
                     "without static_graph(true) and with find_unused_parameters(true)"});
  rankwise::dist::barrier();
}

// With static_graph(true) a parameter unused from the first step on stays
// unused and is never named; one the first step used and a later step left
// out is.
TEST_F(Ddp, StaticGraphNamesOnlyTheParametersTheFirstStepUsed) {
  struct Branches : torch::nn::Module {
    Branches()
        : fc1(register_module("fc1", torch::nn::Linear(5, 3))),
          used(register_module("used", torch::nn::Linear(3, 3))),
          idle(register_module("idle", torch::nn::Linear(3, 3))) {}
    torch::Tensor forward(const torch::Tensor& x) {
      auto h = torch::tanh(fc1(x));
      return use_used ? h + used(h) : h;
    }
    torch::nn::Linear fc1, used, idle;
    bool use_used = true;
  };
  torch::manual_seed(0);
  auto net = std::make_shared<Branches>();
  rankwise::parallel::DistributedDataParallel ddp(
      net, rankwise::parallel::DistributedDataParallelOptions().static_graph(true));
  auto [x, y] = batch_of(rank, 0);
  torch::mse_loss(ddp.forward(x), y).backward();  // `idle` unused from the start
  torch::mse_loss(ddp.forward(x), y).backward();
  net->use_used = false;
  torch::mse_loss(ddp.forward(x), y).backward();
  expect_error_text([&] { ddp.forward(x); },
                    {"parameter(s) [used.weight, used.bias] received no gradient",
                     "without static_graph(true) and with find_unused_parameters(true)"});
  rankwise::dist::barrier();
}

// With find_unused_parameters(true) the parameters behind a returned tensor
// count as used; if that tensor is left out of the loss they get no gradient.
TEST_F(Ddp, ReturnedTensorLeftOutOfTheLossIsNamedWithFindUnusedParameters) {
  struct TwoOutputs : torch::nn::Module {
    TwoOutputs()
        : fc1(register_module("fc1", torch::nn::Linear(5, 8))),
          spare(register_module("spare", torch::nn::Linear(8, 3))),
          idle(register_module("idle", torch::nn::Linear(8, 3))) {}
    std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
      auto h = torch::tanh(fc1(x));
      return {h, spare(h)};  // `idle` is unused (found unused, never named)
    }
    torch::nn::Linear fc1, spare, idle;
  };
  torch::manual_seed(0);
  rankwise::parallel::DistributedDataParallel ddp(
      std::make_shared<TwoOutputs>(),
      rankwise::parallel::DistributedDataParallelOptions().find_unused_parameters(true));
  auto [x, y] = batch_of(rank, 0);
  std::get<0>(ddp.forward(x)).sum().backward();  // the second output left out
  expect_error_text([&] { ddp.forward(x); },
                    {"parameter(s) [spare.weight, spare.bias] received no gradient",
                     "a tensor forward() returned did not take part in the loss"});
  rankwise::dist::barrier();
}

// A model built differently on one rank fails on every rank at once, with
// the same ConfigError naming the parameter and the shapes.
TEST_F(Ddp, ModelThatDiffersAcrossRanksIsNamedOnEveryRank) {
  torch::nn::Linear other_shape(5, rank == 1 ? 9 : 8);
  try {
    rankwise::parallel::DistributedDataParallel ddp(other_shape);
    FAIL() << "expected a ConfigError";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 0 ('weight' on this rank) is [8, 5] float "
                                         "on rank 0 but rank 1: [9, 5] float"),
              std::string::npos)
        << e.what();
  }
  torch::nn::Sequential other_count(torch::nn::Linear(5, 8));
  if (rank == 1) other_count->push_back(torch::nn::Linear(8, 3));
  try {
    rankwise::parallel::DistributedDataParallel ddp(other_count);
    FAIL() << "expected a ConfigError";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 has 2 parameters that require a gradient, rank "
                                         "1 has 4"),
              std::string::npos)
        << e.what();
  }
  rankwise::dist::barrier();
}

namespace {

// PyTorch 2.x's buckets for Net, as its communication hook sees them (see
// tests/python/ddp_buckets_reference.py): {"<cap>": [step][bucket][name]}.
// From the interpreter of RANKWISE_OTHER_PYTHON or RANKWISE_PYTHON whose
// torch is 2.x; an empty object when neither is. (PyTorch 1.13 differs: its
// first bucket holds 1 MiB whatever bucket_cap_mb is, so this small model
// gets one bucket at every cap; rankwise follows 2.x, see bucket_cap_mb.)
nlohmann::json pytorch2_buckets(const std::string& caps) {
  for (const std::string interpreter : {RANKWISE_OTHER_PYTHON, RANKWISE_PYTHON}) {
    if (interpreter.empty()) continue;
    const auto out = rankwise::test::shell(rankwise::test::python(interpreter) +
                                           RANKWISE_SOURCE_DIR
                                           "/tests/python/ddp_buckets_reference.py " + caps +
                                           " 2>/dev/null");
    auto reference = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    if (reference.is_object() && reference.contains("version") &&
        reference["version"].get<std::string>().rfind("1.", 0) != 0) {
      return reference;
    }
  }
  return nlohmann::json::object();
}

}  // namespace

namespace {

// The bucket layout of each cap after 3 steps (the Reducer rebuilds its
// buckets at the second forward from the first backward's arrival order),
// and the layout at construction, which must already be that one.
std::map<std::string, std::vector<std::vector<std::string>>> buckets_after_three_steps(int rank) {
  std::map<std::string, std::vector<std::vector<std::string>>> ours;
  for (const auto& [cap, cap_mb] : {std::pair{"0", 0.0}, {"0.0001", 0.0001}, {"25", 25.0}}) {
    torch::manual_seed(0);
    Net net;
    rankwise::parallel::DistributedDataParallel ddp(
        net, rankwise::parallel::DistributedDataParallelOptions().bucket_cap_mb(cap_mb));
    // rankwise lays the buckets out at construction as the rebuild will
    // (see src/parallel/ddp/ddp.cpp: a restarted process sums its first step like every
    // later one); PyTorch starts from one bucket in parameter order.
    const auto initial = ddp.bucket_parameter_names();
    torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
    train(ddp, opt, rank, 3);
    ddp.check_replicas();
    ours[cap] = ddp.bucket_parameter_names();
    EXPECT_EQ(initial, ours[cap]) << "bucket_cap_mb " << cap << ": layout at construction";
  }
  return ours;
}

}  // namespace

TEST_F(Ddp, ZeroBucketCapMeansOneBucketPerParameter) {
  auto ours = buckets_after_three_steps(rank);
  // Cap 0: one bucket per parameter (all 6), last registered first.
  const std::vector<std::vector<std::string>> one_each = {
      {"spare.bias"}, {"spare.weight"}, {"fc2.bias"}, {"fc2.weight"}, {"fc1.bias"}, {"fc1.weight"}};
  EXPECT_EQ(ours["0"], one_each);
  EXPECT_EQ(ours["25"].size(), 1u);  // the default: everything in one bucket
  EXPECT_THROW(rankwise::parallel::DistributedDataParallel(
                   Net(), rankwise::parallel::DistributedDataParallelOptions().bucket_cap_mb(-1)),
               rankwise::ConfigError);
}

// Registered as its own ctest entry (mp.test_ddp.pytorch2): skipped where no
// Python has torch 2.x.
TEST_F(Ddp, BucketsMatchPyTorch2sOwn) {
  // Rank 0 runs the reference (seconds of Python) and tells the others
  // whether there is one, so that every rank skips or none does.
  const auto reference = rank == 0 ? pytorch2_buckets("0 0.0001 25") : nlohmann::json::object();
  const auto found = rankwise::dist::all_gather(torch::tensor({reference.empty() ? 0 : 1}))[0];
  if (found.item<int>() == 0) {
    GTEST_SKIP() << "no reference Python (" RANKWISE_OTHER_PYTHON " or " RANKWISE_PYTHON
                    ") with torch 2.x";
  }
  // The Reducer's own buckets after 3 steps are the all_reduces PyTorch runs
  // from its second step on, bucket for bucket and in the same order.
  const auto ours = buckets_after_three_steps(rank);
  if (rank != 0) return;
  for (const auto& [cap, layout] : ours) {
    const auto& steps = reference[cap];
    ASSERT_EQ(steps.size(), 3u) << cap;
    EXPECT_EQ(steps[1], steps[2]) << cap << ": PyTorch's layout changed after its rebuild";
    EXPECT_EQ(nlohmann::json(layout), steps[2]) << "bucket_cap_mb " << cap;
  }
}

TEST_F(Ddp, FindUnusedParametersCompletesAndReplicasStayEqual) {
  torch::manual_seed(0);
  Net net;
  net->use_spare = false;
  rankwise::parallel::DistributedDataParallel ddp(
      net, rankwise::parallel::DistributedDataParallelOptions().find_unused_parameters(true));
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  train(ddp, opt, rank, 3);
  EXPECT_NO_THROW(ddp.check_replicas());
}

TEST_F(Ddp, ReplicasBitwiseEqualAfter100Steps) {
  torch::manual_seed(0);
  Net net;
  rankwise::parallel::DistributedDataParallel ddp(net, rankwise::parallel::DistributedDataParallelOptions().bucket_cap_mb(0.0001));
  torch::optim::Adam opt(ddp.parameters(), torch::optim::AdamOptions(0.01));
  train(ddp, opt, rank, 100);
  EXPECT_NO_THROW(ddp.check_replicas());
  auto all = rankwise::dist::all_gather(flat_parameters(*ddp.module()));
  EXPECT_TRUE(all[0].equal(all[1]));
  // check_replicas can fail: perturb one parameter on rank 1 only.
  if (rank == 1) {
    torch::NoGradGuard no_grad;
    ddp.module()->fc2->bias[0] += 1.0;
  }
  try {
    ddp.check_replicas();
    FAIL() << "expected check_replicas to name fc2.bias";
  } catch (const rankwise::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fc2.bias (ranks 1 differ from rank 0)"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("fc1.weight"), std::string::npos) << e.what();
  }
}

TEST_F(Ddp, UnevenInputsRaiseNamingTheRankByDefault) {
  torch::manual_seed(0);
  Net net;
  rankwise::parallel::DistributedDataParallel ddp(net);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  const int batches = rank == 0 ? 10 : 9;  // rank 1 runs out first
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int step = 0; step < batches; ++step) {
      auto [x, y] = batch_of(rank, step);
      opt.zero_grad();
      torch::mse_loss(ddp.forward(x), y).backward();
      opt.step();
    }
    ddp.join();
    FAIL() << "expected an uneven-inputs error";
  } catch (const rankwise::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) [1] ran out of batches"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  rankwise::dist::barrier();
}

// kJoin with find_unused_parameters: the training rank also all_reduces its
// map of used parameters after the buckets; the joined rank must match it.
TEST_F(Ddp, UnevenInputsJoinCompletesWithUnusedParameters) {
  torch::manual_seed(0);
  Net net;
  net->use_spare = false;
  rankwise::parallel::DistributedDataParallel ddp(net, rankwise::parallel::DistributedDataParallelOptions()
                                                 .uneven_inputs(rankwise::parallel::UnevenInputs::kJoin)
                                                 .find_unused_parameters(true));
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  const int batches = rank == 0 ? 6 : 4;  // rank 1 shadows two steps
  train(ddp, opt, rank, batches);
  ddp.join();
  auto all = rankwise::dist::all_gather(flat_parameters(*ddp.module()));
  EXPECT_TRUE(all[0].equal(all[1]));
  ddp.check_replicas();
  rankwise::dist::barrier();
}

TEST_F(Ddp, UnevenInputsJoinCompletes) {
  torch::manual_seed(0);
  Net net;
  rankwise::parallel::DistributedDataParallel ddp(
      net, rankwise::parallel::DistributedDataParallelOptions().uneven_inputs(rankwise::parallel::UnevenInputs::kJoin));
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  const int batches = rank == 0 ? 10 : 9;
  train(ddp, opt, rank, batches);
  auto before_join = flat_parameters(*ddp.module()).clone();
  ddp.join();
  // Rank 1 skipped the optimizer step of step 10; join() hands every rank the
  // model of the last rank to join (rank 0), so replicas are equal again.
  auto all = rankwise::dist::all_gather(flat_parameters(*ddp.module()));
  EXPECT_TRUE(all[0].equal(all[1]));
  auto rank0_before = rankwise::dist::all_gather(before_join)[0];
  EXPECT_TRUE(all[0].equal(rank0_before));
  rankwise::dist::barrier();
}
