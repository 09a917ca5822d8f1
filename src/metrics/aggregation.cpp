#include "rankwise/metrics/aggregation.h"
#include "util/text.h"

#include <fmt/format.h>
#include <cmath>
#include <limits>

#include "metrics/common.h"

namespace rankwise::metrics {

namespace {

// `values` as float64 on the CPU, rows marked padding removed.
torch::Tensor kept_values(const torch::Tensor& values, const PaddingMask& is_padding,
                          const std::string& where) {
  if (!values.defined()) fail(where, "values is an undefined tensor");
  if (values.is_complex()) fail(where, "complex values are not supported");
  auto v = values.detach().to(torch::kCPU, torch::kDouble);
  if (is_padding.empty()) return v;
  if (v.dim() == 0) {
    fail(where, "a padding mask needs values of shape [N, ...], got a 0-d tensor");
  }
  return v.index({is_padding.keep(v.size(0), where)});
}

}  // namespace

// ------------------------------------------------------------------ Sum
Sum::Sum() : Metric("Sum") { add_state("sum", torch::zeros({}, torch::kDouble), Reduction::kSum); }

void Sum::update(const torch::Tensor& values, const PaddingMask& is_padding) {
  auto v = kept_values(values, is_padding, context(name(), "update"));
  state_tensor("sum").add_(v.sum());
}

void Sum::update(double value) { state_tensor("sum").add_(value); }

torch::Tensor Sum::compute_from(const StateMap& states) const { return states.at("sum").clone(); }

// ------------------------------------------------------------------ Mean
Mean::Mean() : Metric("Mean") {
  add_state("sum", torch::zeros({}, torch::kDouble), Reduction::kSum);
  add_state("weight", torch::zeros({}, torch::kDouble), Reduction::kSum);
}

void Mean::update(const torch::Tensor& values, const PaddingMask& is_padding) {
  const std::string where = context(name(), "update");
  if (values.defined() && values.dim() > 1) {
    fail(where, "values must have shape [N] or [] (one value per sample), got " + shape_of(values) +
                    "; reduce the other dimensions first, or use update_weighted");
  }
  auto v = kept_values(values, is_padding, where);
  state_tensor("sum").add_(v.sum());
  state_tensor("weight").add_(static_cast<double>(v.numel()));
}

void Mean::update(double value, double weight) {
  if (!std::isfinite(weight) || weight < 0) {
    fail(context(name(), "update"),
         fmt::format("weight must be finite and >= 0, got {:f}", weight));
  }
  if (weight == 0) return;  // 0 * inf would poison the sum
  state_tensor("sum").add_(value * weight);
  state_tensor("weight").add_(weight);
}

void Mean::update_weighted(const torch::Tensor& values, const torch::Tensor& weights,
                           const PaddingMask& is_padding) {
  const std::string where = context(name(), "update_weighted");
  if (!values.defined() || !weights.defined() || values.dim() != 1 ||
      values.sizes() != weights.sizes()) {
    fail(where, "values and weights must both have shape [N], got " +
                    (values.defined() ? shape_of(values) : std::string("undefined")) + " and " +
                    (weights.defined() ? shape_of(weights) : std::string("undefined")));
  }
  auto v = kept_values(values, is_padding, where);
  auto w = kept_values(weights, is_padding, where);
  if (w.numel() > 0 && (w.min().item<double>() < 0 || !w.isfinite().all().item<bool>())) {
    fail(where, "weights must be finite and >= 0");
  }
  auto nonzero = w.ne(0);  // 0 * inf would poison the sum
  state_tensor("sum").add_((v.index({nonzero}) * w.index({nonzero})).sum());
  state_tensor("weight").add_(w.sum());
}

torch::Tensor Mean::compute_from(const StateMap& states) const {
  // 0 / 0 = NaN when nothing was counted.
  return states.at("sum") / states.at("weight");
}

// ------------------------------------------------------------------ Min / Max
Extreme::Extreme(const std::string& name, bool largest)
    : Metric(name), state_(largest ? "max" : "min"), largest_(largest) {
  const double start = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  add_state(state_, torch::full({}, start, torch::kDouble), largest ? Reduction::kMax : Reduction::kMin);
}

void Extreme::update(const torch::Tensor& values, const PaddingMask& is_padding) {
  auto v = kept_values(values, is_padding, context(name(), "update"));
  if (v.numel() > 0) fold((largest_ ? v.max() : v.min()).to(torch::kDouble));
}

void Extreme::update(double value) { fold(torch::full({}, value, torch::kDouble)); }

void Extreme::fold(const torch::Tensor& candidate) {
  auto& m = state_tensor(state_);
  m = largest_ ? torch::maximum(m, candidate) : torch::minimum(m, candidate);
}

torch::Tensor Extreme::compute_from(const StateMap& states) const { return states.at(state_).clone(); }

}  // namespace rankwise::metrics
