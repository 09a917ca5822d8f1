#pragma once
/// \file aggregation.h
/// Sum, weighted Mean, Min and Max over every rank's values
/// (torchmetrics.aggregation: SumMetric, MeanMetric, MinMetric, MaxMetric).
/// All are decomposable (one all_reduce); values are accumulated in float64.

#include "rankwise/metrics/metric.h"

namespace rankwise::metrics {

/// Sum of every value passed on any rank.
/// State: "sum" float64 [] (kSum). compute(): 0-d float64 (0 before any update).
class Sum : public Metric {
 public:
  Sum();
  /// Adds every element of `values` (any shape; floating, integer or bool;
  /// converted to float64 before summing). With a mask, `values` must have
  /// shape [N, ...] and the rows marked padding are left out. Local.
  /// Throws ConfigError when the mask length differs from N.
  void update(const torch::Tensor& values, const PaddingMask& is_padding = {});
  /// Adds one value. Local.
  void update(double value);
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
};

/// Weighted mean: sum(w_i * x_i) / sum(w_i) over every rank. The sum and the
/// weight are reduced, then divided once, so a rank with 300 samples weighs
/// three times one with 100 (never the mean of the per-rank means).
/// States: "sum" float64 [] (kSum), "weight" float64 [] (kSum).
/// compute(): 0-d float64; NaN when the total weight is 0 (nothing counted).
class Mean : public Metric {
 public:
  Mean();
  /// Each element of `values` (shape [N] or [], floating/integer) is one
  /// sample of weight 1; rows marked padding are left out. Local.
  /// Throws ConfigError when `values` has more than one dimension or the mask
  /// length differs from N.
  void update(const torch::Tensor& values, const PaddingMask& is_padding = {});
  /// Adds `value` with weight `weight`, e.g. a batch's mean loss and its
  /// number of (non-padding) samples: update(loss.item<double>(), n). Local.
  /// Throws ConfigError when weight < 0 or is not finite.
  void update(double value, double weight = 1.0);
  /// Per-sample weights: values [N] and weights [N] (floating, >= 0). Local.
  /// Throws ConfigError on mismatched shapes or negative weights.
  void update_weighted(const torch::Tensor& values, const torch::Tensor& weights,
                       const PaddingMask& is_padding = {});
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
};

/// Min and Max: the running extreme of every value passed on any rank.
class Extreme : public Metric {
 public:
  /// Takes the extreme over `values` (any shape; rows [N, ...] marked padding
  /// are left out). Local. Throws ConfigError on a mask of the wrong length.
  void update(const torch::Tensor& values, const PaddingMask& is_padding = {});
  void update(double value);
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;

 protected:
  Extreme(const std::string& name, bool largest);

 private:
  void fold(const torch::Tensor& candidate);  // 0-d float64 into the state
  std::string state_;  // "min" or "max"
  bool largest_;
};

/// Minimum of every value passed on any rank. State: "min" float64 [] (kMin),
/// default +inf. compute(): 0-d float64, +inf before any update (as torchmetrics).
class Min : public Extreme {
 public:
  Min() : Extreme("Min", false) {}
};

/// Maximum of every value passed on any rank. State: "max" float64 [] (kMax),
/// default -inf. compute(): 0-d float64, -inf before any update.
class Max : public Extreme {
 public:
  Max() : Extreme("Max", true) {}
};

}  // namespace rankwise::metrics
