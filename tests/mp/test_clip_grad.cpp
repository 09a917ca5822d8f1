// rankwise-test-nproc: 2 3
// rankwise-test-part: pytorch ClipGrad.*MatchPyTorch
// Gradient clipping by the global norm on 2 and 3 ranks: clip_grad_norm on
// DistributedDataParallel's averaged gradients and ZeroRedundancyOptimizer's
// sharded clip_grad_norm give PyTorch's clip_grad_norm_ total norm and
// clipped gradients (tests/python/clip_grad_reference.py; the *MatchPyTorch
// tests are their own ctest entry, skipped without a Python with torch); a
// nonfinite norm throws the same error on every rank; bad arguments are
// ConfigErrors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"
#include "rankwise/parallel/clip_grad.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"
#include "support/shell.h"

namespace {

const std::vector<std::vector<int64_t>> kShapes = {{3, 4}, {7}, {2, 3, 2}, {5}, {1}, {4, 4}};
constexpr std::size_t kWithoutGrad = 2;  // frozen: DDP leaves it without a gradient
constexpr double kScale = 1.5;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Parameters of kShapes (zeros); forward(x) = sum_i (p_i * x_i).sum() over
// the trainable ones, x holding each x_i flattened in turn, so that p_i's
// gradient is exactly x_i.
struct GradientsImpl : torch::nn::Module {
  GradientsImpl() {
    for (std::size_t i = 0; i < kShapes.size(); ++i) {
      params.push_back(register_parameter("p" + std::to_string(i), torch::zeros(kShapes[i]),
                                          /*requires_grad=*/i != kWithoutGrad));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor out = torch::zeros({});
    int64_t offset = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (i == kWithoutGrad) continue;
      const int64_t n = params[i].numel();
      out = out + (params[i].reshape({-1}) * x.narrow(0, offset, n)).sum();
      offset += n;
    }
    return out;
  }
  std::vector<torch::Tensor> params;
};
TORCH_MODULE(Gradients);

// Rank r's gradients (as in clip_grad_reference.py), concatenated.
torch::Tensor rank_gradients(int rank) {
  std::vector<torch::Tensor> parts;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    if (i == kWithoutGrad) continue;
    int64_t numel = 1;
    for (const int64_t d : kShapes[i]) numel *= d;
    parts.push_back(torch::sin(torch::arange(numel, torch::kFloat32) * static_cast<double>(i + 1) +
                               rank) *
                    kScale);
  }
  return torch::cat(parts);
}

// One backward through DDP: every rank's gradients, averaged.
void backward(rankwise::parallel::DistributedDataParallel<Gradients>& ddp, torch::Tensor x) {
  for (auto& p : ddp.parameters()) p.mutable_grad() = torch::Tensor();
  ddp.forward(x).backward();
}

struct Case {
  double max_norm;
  double norm_type;
};
// Norm types 2, 1, inf and 3, each with max_norm below the norm (clipped) and
// above it (unchanged).
const std::vector<Case> kCases = {{0.25, 2}, {1000, 2}, {0.25, 1}, {1000, 1},
                                  {0.25, kInf}, {1000, kInf}, {0.25, 3}, {1000, 3}};

std::string spec_json() {
  nlohmann::json cases = nlohmann::json::array();
  for (const Case& c : kCases) {
    cases.push_back({c.max_norm, std::isinf(c.norm_type) ? nlohmann::json("inf")
                                                         : nlohmann::json(c.norm_type)});
  }
  return nlohmann::json{{"world_size", rankwise::dist::world_size()},
                        {"scale", kScale},
                        {"shapes", kShapes},
                        {"without_grad", nlohmann::json::array({kWithoutGrad})},
                        {"cases", cases}}
      .dump();
}

// PyTorch's answers for kCases, per case {total norm, then every gradient
// flattened in order}, float64: rank 0 runs the reference and broadcasts
// them with a first element 1 (0 when no Python with torch answered).
torch::Tensor reference() {
  int64_t per_case = 1;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    if (i != kWithoutGrad) per_case += torch::zeros(kShapes[i]).numel();
  }
  torch::Tensor flat = torch::zeros({1 + per_case * static_cast<int64_t>(kCases.size())}, torch::kFloat64);
  if (rankwise::dist::rank() == 0) {
    for (const std::string interpreter : {RANKWISE_PYTHON, RANKWISE_OTHER_PYTHON}) {
      if (interpreter.empty()) continue;
      const auto out = rankwise::test::shell(rankwise::test::python(interpreter) +
                                             RANKWISE_SOURCE_DIR "/tests/python/clip_grad_reference.py '" +
                                             spec_json() + "' 2>/dev/null");
      const auto json = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
      if (!json.is_object() || !json.contains("cases")) continue;
      std::vector<double> values = {1};
      for (const auto& c : json["cases"]) {
        values.push_back(c["total_norm"].get<double>());
        for (const auto& g : c["grads"]) {
          if (g.is_null()) continue;
          for (const auto& v : g) values.push_back(v.get<double>());
        }
      }
      if (values.size() == static_cast<std::size_t>(flat.numel())) {
        flat = torch::tensor(values, torch::kFloat64);
        std::printf("clip_grad reference: torch %s (%s)\n",
                    json["version"].get<std::string>().c_str(), interpreter.c_str());
        break;
      }
    }
  }
  rankwise::dist::broadcast(flat, 0);
  return flat;
}

std::string describe(const Case& c) {
  return "max_norm " + std::to_string(c.max_norm) + ", norm_type " + std::to_string(c.norm_type);
}

// For every case: fresh DDP-averaged gradients, `clip` them, and compare the
// total norm and every clipped gradient with PyTorch's within 1e-6 relative
// (gradients: relative to their parameter's largest value).
void expect_pytorchs(rankwise::parallel::DistributedDataParallel<Gradients>& ddp,
                     const std::function<torch::Tensor(const Case&)>& clip) {
  const torch::Tensor ref = reference();
  if (ref[0].item<double>() == 0) {
    GTEST_SKIP() << "no reference Python (" RANKWISE_PYTHON " or " RANKWISE_OTHER_PYTHON
                    ") with torch";
  }
  const torch::Tensor x = rank_gradients(rankwise::dist::rank());
  int64_t offset = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    backward(ddp, x);
    const torch::Tensor before = ddp.parameters()[0].grad().clone();
    const torch::Tensor total = clip(c);
    const double expected = ref[offset++].item<double>();
    EXPECT_EQ(total.dim(), 0);
    EXPECT_EQ(total.scalar_type(), torch::kFloat32);
    EXPECT_LE(std::abs(total.item<double>() - expected), 1e-6 * expected)
        << "total norm " << total.item<double>() << ", PyTorch's " << expected;
    // The cases cover both sides of max_norm.
    EXPECT_EQ(c.max_norm < expected, c.max_norm == 0.25) << "PyTorch's norm " << expected;
    for (std::size_t i = 0; i < kShapes.size(); ++i) {
      const torch::Tensor& g = ddp.parameters()[i].grad();
      if (i == kWithoutGrad) {
        EXPECT_FALSE(g.defined()) << "parameter " << i;
        continue;
      }
      const torch::Tensor want = ref.narrow(0, offset, g.numel());
      offset += g.numel();
      const double diff = (g.reshape({-1}).to(torch::kFloat64) - want).abs().max().item<double>();
      EXPECT_LE(diff, 1e-6 * want.abs().max().item<double>()) << "parameter " << i;
    }
    // Every rank returns the same norm and keeps the same gradients.
    for (const auto& other : rankwise::dist::all_gather(total.reshape({1}))) {
      EXPECT_TRUE(other.equal(total.reshape({1})));
    }
    for (const auto& other : rankwise::dist::all_gather(ddp.parameters()[0].grad())) {
      EXPECT_TRUE(other.equal(ddp.parameters()[0].grad()));
    }
    if (c.max_norm == 1000) EXPECT_TRUE(before.equal(ddp.parameters()[0].grad()));
  }
}

rankwise::parallel::ZeroRedundancyOptimizer zero_of(rankwise::parallel::DistributedDataParallel<Gradients>& ddp) {
  return rankwise::parallel::ZeroRedundancyOptimizer(ddp.parameters(), [](auto groups) {
    return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.1));
  });
}

TEST(ClipGrad, DdpGradientsMatchPyTorch) {
  rankwise::parallel::DistributedDataParallel ddp{Gradients()};
  expect_pytorchs(ddp, [&](const Case& c) {
    return rankwise::parallel::clip_grad_norm(ddp.parameters(), c.max_norm, c.norm_type);
  });
}

TEST(ClipGrad, ZeroShardedNormsMatchPyTorch) {
  rankwise::parallel::DistributedDataParallel ddp{Gradients()};
  auto zero = zero_of(ddp);
  expect_pytorchs(ddp, [&](const Case& c) { return zero.clip_grad_norm(c.max_norm, c.norm_type); });
}

// The message after "rankwise: rank r/W: ", the same on every rank.
void expect_same_on_every_rank(const std::string& what) {
  const std::string rest = what.substr(what.find(": ", what.find("rank ")) + 2);
  const auto hash = static_cast<int64_t>(std::hash<std::string>{}(rest));
  for (const auto& other : rankwise::dist::all_gather(torch::tensor({hash}, torch::kInt64))) {
    EXPECT_EQ(other.item<int64_t>(), hash) << "another rank's message differs from: " << rest;
  }
}

// An inf in rank 0's gradient of p0 (DDP averages it into every rank's).
void inf_on_rank_zero(rankwise::parallel::DistributedDataParallel<Gradients>& ddp, double value) {
  torch::Tensor x = rank_gradients(rankwise::dist::rank());
  if (rankwise::dist::rank() == 0) x[3] = value;
  backward(ddp, x);
}

void expect_nonfinite_error(const std::function<torch::Tensor()>& clip, const std::string& operation) {
  bool thrown = false;
  try {
    clip();
  } catch (const rankwise::ConfigError& e) {
    ADD_FAILURE() << "a ConfigError: " << e.what();
  } catch (const rankwise::Error& e) {
    thrown = true;
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(rankwise::dist::rank()) + "/"), std::string::npos) << what;
    EXPECT_NE(what.find(operation + ": the total norm of order 2 of the gradients is inf"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("error_if_nonfinite=false"), std::string::npos) << what;
    expect_same_on_every_rank(what);
  }
  // Every rank threw (and got here: nobody waits in a collective).
  const auto all = rankwise::dist::all_gather(torch::tensor({thrown ? 1 : 0}));
  for (std::size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r].item<int>(), 1) << "rank " << r;
}

TEST(ClipGrad, NonfiniteNormThrowsTheSameErrorOnEveryRank) {
  rankwise::parallel::DistributedDataParallel ddp{Gradients()};
  auto zero = zero_of(ddp);
  inf_on_rank_zero(ddp, kInf);
  const torch::Tensor before = ddp.parameters()[1].grad().clone();
  expect_nonfinite_error(
      [&] { return rankwise::parallel::clip_grad_norm(ddp.parameters(), 1.0, 2.0, true); },
      "clip_grad_norm");
  // Only p0's owner reads the inf; the all_reduce tells the others.
  expect_nonfinite_error([&] { return zero.clip_grad_norm(1.0, 2.0, true); },
                         "ZeroRedundancyOptimizer::clip_grad_norm");
  EXPECT_TRUE(before.equal(ddp.parameters()[1].grad())) << "gradients scaled despite the error";
  EXPECT_TRUE(std::isinf(ddp.parameters()[0].grad().reshape({-1})[3].item<double>()));

  // Without error_if_nonfinite: the norm is returned (PyTorch scales by it).
  EXPECT_TRUE(std::isinf(zero.clip_grad_norm(1.0, kInf).item<double>()));
  // A nan on one rank's share is nan on every rank, also for the max norm,
  // whose all_reduce compares.
  inf_on_rank_zero(ddp, kNan);
  EXPECT_TRUE(std::isnan(zero.clip_grad_norm(1.0, kInf).item<double>()));
  inf_on_rank_zero(ddp, kNan);
  EXPECT_TRUE(std::isnan(zero.clip_grad_norm(1.0, 2.0).item<double>()));
}

TEST(ClipGrad, BadArgumentsAreConfigErrorsNamingTheValue) {
  rankwise::parallel::DistributedDataParallel ddp{Gradients()};
  auto zero = zero_of(ddp);
  backward(ddp, rank_gradients(rankwise::dist::rank()));
  const std::vector<std::pair<Case, std::string>> bad = {
      {{1.0, 0.0}, "norm_type 0 is not a norm"},
      {{1.0, -2.0}, "norm_type -2 is not a norm"},
      {{1.0, kNan}, "norm_type nan is not a norm"},
      {{-1.0, 2.0}, "max_norm -1 must be a number >= 0"},
      {{kNan, 2.0}, "max_norm nan must be a number >= 0"}};
  for (const auto& [c, message] : bad) {
    SCOPED_TRACE(describe(c));
    for (const bool sharded : {false, true}) {
      try {
        if (sharded) {
          zero.clip_grad_norm(c.max_norm, c.norm_type);
        } else {
          rankwise::parallel::clip_grad_norm(ddp.parameters(), c.max_norm, c.norm_type);
        }
        ADD_FAILURE() << "accepted";
      } catch (const rankwise::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      }
    }
  }
  // No rank started a collective: the next one pairs up.
  const double total = zero.clip_grad_norm(1000).item<double>();
  EXPECT_NEAR(total, rankwise::parallel::clip_grad_norm(ddp.parameters(), 1000).item<double>(),
              1e-6 * total);
}

TEST(ClipGrad, NoGradientsGiveZero) {
  rankwise::parallel::DistributedDataParallel ddp{Gradients()};
  auto zero = zero_of(ddp);
  const torch::Tensor local = rankwise::parallel::clip_grad_norm(ddp.parameters(), 1.0);
  EXPECT_EQ(local.dim(), 0);
  EXPECT_EQ(local.item<double>(), 0.0);
  EXPECT_EQ(zero.clip_grad_norm(1.0, kInf).item<double>(), 0.0);
  EXPECT_EQ(zero.clip_grad_norm(1.0, 2.0).item<double>(), 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  rankwise::dist::init();
  return RUN_ALL_TESTS();
}
