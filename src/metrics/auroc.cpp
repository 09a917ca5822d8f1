#include "rankwise/metrics/auroc.h"
#include "util/text.h"

#include <fmt/format.h>
#include <limits>

#include "metrics/common.h"

namespace rankwise::metrics {

namespace {

// Validated {scores float64 [n], target int64 [n]} on the CPU.
std::pair<torch::Tensor, torch::Tensor> check_binary(const torch::Tensor& scores,
                                                     const torch::Tensor& target,
                                                     const std::string& where) {
  if (!scores.defined() || !target.defined())
    fail(where, "scores or target is an undefined tensor");
  if (scores.dim() != 1 || target.dim() != 1 || scores.size(0) != target.size(0)) {
    fail(where, "scores and target must both have shape [N], got " + shape_of(scores) + " and " +
                    shape_of(target));
  }
  if (!scores.is_floating_point()) {
    fail(where, "scores must be floating-point (probabilities or logits), got dtype " +
                    dtype_of(scores));
  }
  if (target.is_floating_point() || target.is_complex()) {
    fail(where, "target must be bool or an integer dtype holding 0/1, got dtype " +
                    dtype_of(target) + "; convert with .to(torch::kLong)");
  }
  auto s = scores.detach().to(torch::kCPU, torch::kDouble);
  auto t = target.detach().to(torch::kCPU, torch::kLong);
  if (t.numel() > 0 && (t.min().item<int64_t>() < 0 || t.max().item<int64_t>() > 1)) {
    fail(where, fmt::format("binary AUROC needs targets 0 or 1, got values in [{}, {}]",
                            t.min().item<int64_t>(), t.max().item<int64_t>()));
  }
  if (s.isnan().any().item<bool>()) fail(where, "scores hold NaN; AUROC is undefined for them");
  return {s, t};
}

}  // namespace

double binary_auroc(const torch::Tensor& scores, const torch::Tensor& target) {
  auto [s, t] = check_binary(scores, target, context("AUROC", "binary_auroc"));
  const int64_t n = s.size(0);
  // Sort by decreasing score; each group of equal scores is one ROC point
  // (sklearn's roc_curve: thresholds at the distinct scores). The area is
  // the trapezoidal sum, accumulated exactly in integers:
  //   2 * area * P * N = sum over groups of dFP * (TP_before + TP_after).
  auto order = std::get<1>(s.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  auto ss = s.index({order});
  auto ts = t.index({order});
  const double* sv = ss.data_ptr<double>();
  const int64_t* tv = ts.data_ptr<int64_t>();
  int64_t tp = 0, fp = 0;
  __int128 twice_area = 0;
  for (int64_t i = 0; i < n;) {
    const int64_t tp_before = tp, fp_before = fp;
    int64_t j = i;
    for (; j < n && sv[j] == sv[i]; ++j) {
      if (tv[j] == 1) ++tp; else ++fp;
    }
    twice_area += static_cast<__int128>(fp - fp_before) * (tp_before + tp);
    i = j;
  }
  if (tp == 0 || fp == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(static_cast<long double>(twice_area) /
                             (2.0L * static_cast<long double>(tp) * static_cast<long double>(fp)));
}

AUROC::AUROC() : Metric("AUROC") {
  add_state("scores", torch::zeros({0}, torch::kDouble), Reduction::kCat);
  add_state("target", torch::zeros({0}, torch::kLong), Reduction::kCat);
}

void AUROC::update(const torch::Tensor& scores, const torch::Tensor& target,
                   const PaddingMask& is_padding) {
  const std::string where = context(name(), "update");
  auto [s, t] = check_binary(scores, target, where);
  if (!is_padding.empty()) {
    auto keep = is_padding.keep(s.size(0), where);
    s = s.index({keep});
    t = t.index({keep});
  }
  append_state("scores", s);
  append_state("target", t);
}

torch::Tensor AUROC::compute_from(const StateMap& states) const {
  return torch::full({}, binary_auroc(states.at("scores"), states.at("target")), torch::kDouble);
}

}  // namespace rankwise::metrics
