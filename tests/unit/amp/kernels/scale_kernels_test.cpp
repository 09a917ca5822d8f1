// GradScaler's kernels: the plain-tensor fallbacks against values computed
// by hand (in every leg), and against ATen's own kernels where this libtorch
// has them (the CPU in 2.x, CUDA when present; Debian's 1.13 has neither
// here, so it runs the fallback alone).
#include "amp/kernels/scale_kernels.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace kernels = rankwise::amp::kernels;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct Scale {
  torch::Tensor scale, tracker;
};

Scale scale_of(float scale, int tracker, const torch::Device& device = torch::kCPU) {
  return {torch::full({}, scale, torch::TensorOptions().device(device).dtype(torch::kFloat)),
          torch::full({}, tracker, torch::TensorOptions().device(device).dtype(torch::kInt))};
}

}  // namespace

TEST(ScaleKernels, FallbackUnscaleFindsInfAndNanAndScalesEverything) {
  std::vector<torch::Tensor> grads{torch::tensor({1.0f, 2.0f, kInf}), torch::tensor({kNan, 4.0f})};
  auto found_inf = torch::zeros({});
  kernels::fallback_non_finite_check_and_unscale_(grads, found_inf, torch::full({}, 0.25f));
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  EXPECT_EQ(grads[0][0].item<float>(), 0.25f);
  EXPECT_EQ(grads[0][1].item<float>(), 0.5f);
  EXPECT_EQ(grads[0][2].item<float>(), kInf);
  EXPECT_TRUE(std::isnan(grads[1][0].item<float>()));
  EXPECT_EQ(grads[1][1].item<float>(), 1.0f);

  std::vector<torch::Tensor> clean{torch::tensor({8.0f, -16.0f}, torch::kDouble)};
  auto none = torch::zeros({1});
  kernels::fallback_non_finite_check_and_unscale_(clean, none, torch::full({1}, 0.125f));
  EXPECT_EQ(none.item<float>(), 0.0f);
  EXPECT_EQ(clean[0][0].item<double>(), 1.0);
  EXPECT_EQ(clean[0][1].item<double>(), -2.0);
}

TEST(ScaleKernels, FallbackChecksBeforeScaling) {
  // 3e38 is finite; times 4 it would overflow, which is no reason to skip.
  std::vector<torch::Tensor> grads{torch::tensor({3e38f})};
  auto found_inf = torch::zeros({});
  kernels::fallback_non_finite_check_and_unscale_(grads, found_inf, torch::full({}, 4.0f));
  EXPECT_EQ(found_inf.item<float>(), 0.0f);
  EXPECT_EQ(grads[0][0].item<float>(), kInf);
}

TEST(ScaleKernels, FallbackUpdateBacksOffGrowsAndCounts) {
  struct Case {
    float scale;
    int tracker;
    float found_inf;
    float new_scale;
    int new_tracker;
  };
  // growth 2, backoff 0.5, interval 3
  const std::vector<Case> cases{
      {1024.0f, 0, 0.0f, 1024.0f, 1},   // one clean step more
      {1024.0f, 1, 0.0f, 1024.0f, 2},
      {1024.0f, 2, 0.0f, 2048.0f, 0},   // the third: grows
      {1024.0f, 2, 1.0f, 512.0f, 0},    // inf: backs off, count restarts
      {1024.0f, 1, 2.0f, 512.0f, 0},    // several optimizers' flags summed
      {3e38f, 2, 0.0f, 3e38f, 0},       // 6e38 is not a float: kept, count restarts
  };
  for (const auto& c : cases) {
    auto s = scale_of(c.scale, c.tracker);
    kernels::fallback_update_scale_(s.scale, s.tracker, torch::full({}, c.found_inf), 2.0, 0.5, 3);
    EXPECT_EQ(s.scale.item<float>(), c.new_scale) << c.scale << " " << c.tracker << " " << c.found_inf;
    EXPECT_EQ(s.tracker.item<int>(), c.new_tracker) << c.scale << " " << c.tracker << " " << c.found_inf;
  }
  // The factors multiply in double, the result is stored as float.
  auto s = scale_of(3.0f, 0);
  kernels::fallback_update_scale_(s.scale, s.tracker, torch::ones({1}), 2.0, 0.1, 3);
  EXPECT_EQ(s.scale.item<float>(), static_cast<float>(3.0f * 0.1));
}

TEST(ScaleKernels, AtenHasTheCpuKernelsFromTorch2) {
#if TORCH_VERSION_MAJOR < 2
  EXPECT_FALSE(kernels::aten_has_kernels(torch::kCPU));  // 1.13: CUDA only
#elif TORCH_VERSION_MINOR >= 5
  EXPECT_TRUE(kernels::aten_has_kernels(torch::kCPU));
#else
  GTEST_SKIP() << "torch 2." << TORCH_VERSION_MINOR << ": either";
#endif
}

namespace {

// ATen and the fallback on the same inputs give the same bits.
void expect_fallback_equals_aten(const torch::Device& device) {
  if (!kernels::aten_has_kernels(device.type())) {
    GTEST_SKIP() << "this libtorch has no ATen kernels for " << device << " (the fallback runs alone)";
  }
  torch::manual_seed(7);
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16}) {
    for (bool with_inf : {false, true}) {
      const auto options = torch::TensorOptions().device(device).dtype(dtype);
      std::vector<torch::Tensor> a{torch::randn({5, 3}, options) * 1000, torch::randn({7}, options)};
      if (with_inf) a[1][3] = kNan;
      std::vector<torch::Tensor> b{a[0].clone(), a[1].clone()};
      const auto inv_scale = torch::full({}, 1.0f / 3.0f, torch::TensorOptions().device(device));
      auto found_a = torch::zeros({}, torch::TensorOptions().device(device));
      auto found_b = found_a.clone();
      at::_amp_foreach_non_finite_check_and_unscale_(a, found_a, inv_scale);
      kernels::fallback_non_finite_check_and_unscale_(b, found_b, inv_scale);
      EXPECT_EQ(found_a.item<float>(), found_b.item<float>());
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(torch::equal(a[i].nan_to_num(0), b[i].nan_to_num(0))) << dtype << " grad " << i;
      }
    }
  }
  for (float found_inf : {0.0f, 1.0f}) {
    for (int tracker : {0, 4}) {
      auto a = scale_of(1.0f / 3.0f, tracker, device);
      auto b = scale_of(1.0f / 3.0f, tracker, device);
      const auto found = torch::full({}, found_inf, torch::TensorOptions().device(device));
      at::_amp_update_scale_(a.scale, a.tracker, found, 1.7, 0.3, 5);
      kernels::fallback_update_scale_(b.scale, b.tracker, found, 1.7, 0.3, 5);
      EXPECT_TRUE(torch::equal(a.scale, b.scale)) << a.scale << " " << b.scale;
      EXPECT_TRUE(torch::equal(a.tracker, b.tracker)) << a.tracker << " " << b.tracker;
    }
  }
}

}  // namespace

TEST(ScaleKernels, FallbackEqualsAtenOnTheCpu) { expect_fallback_equals_aten(torch::kCPU); }

TEST(ScaleKernels, FallbackEqualsAtenOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  expect_fallback_equals_aten(torch::Device(torch::kCUDA, 0));
}

TEST(ScaleKernels, ForceFallbackRoutesTheDispatchingFunctions) {
  // Through the dispatching function, with and without the guard: same values.
  for (bool force : {false, true}) {
    std::optional<kernels::ForceFallback> guard;
    if (force) guard.emplace();
    auto s = scale_of(64.0f, 0);
    kernels::update_scale_(s.scale, s.tracker, torch::ones({}), 2.0, 0.5, 3);
    EXPECT_EQ(s.scale.item<float>(), 32.0f);
    std::vector<torch::Tensor> grads{torch::tensor({2.0f, kInf})};
    auto found_inf = torch::zeros({});
    kernels::non_finite_check_and_unscale_(grads, found_inf, torch::full({}, 0.5f));
    EXPECT_EQ(found_inf.item<float>(), 1.0f);
    EXPECT_EQ(grads[0][0].item<float>(), 1.0f);
  }
}
