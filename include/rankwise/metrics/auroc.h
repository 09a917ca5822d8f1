#pragma once
/// \file auroc.h
/// Binary AUROC over every rank's samples (scikit-learn's roc_auc_score: one ROC point per
/// distinct score, trapezoidal area). Not decomposable: inputs are kept (kCat states) and
/// compute() gathers every rank's shard (any length, also 0), then computes once on the union.
/// Memory: 16 bytes per sample per rank. See docs/metrics.md.

#include "rankwise/metrics/metric.h"

namespace rankwise::metrics {

/// AUROC of binary `scores` against `target`, locally (no communication;
/// torchmetrics.functional style). scores: [N] floating (any monotone score:
/// probability or logit). target: [N] bool or integer with values 0/1.
/// Returns a double; NaN when the targets hold only one class (sklearn raises
/// there; a NaN keeps every rank on the same path). Throws ConfigError on
/// mismatched shapes, non-binary targets or NaN scores.
double binary_auroc(const torch::Tensor& scores, const torch::Tensor& target);

/// Distributed binary AUROC. States: "scores" float64 [n] (kCat), "target"
/// int64 [n] (kCat). compute(): 0-d float64 (NaN when only one class occurs
/// over all ranks). compute() issues two all_gathers (lengths, then data).
class AUROC : public Metric {
 public:
  AUROC();
  /// scores: [N] floating; target: [N] bool or integer, values 0/1; rows
  /// marked padding are left out. Local. Throws ConfigError on mismatched
  /// shapes, non-binary targets, NaN scores or a mask of the wrong length.
  void update(const torch::Tensor& scores, const torch::Tensor& target,
              const PaddingMask& is_padding = {});
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
};

}  // namespace rankwise::metrics
