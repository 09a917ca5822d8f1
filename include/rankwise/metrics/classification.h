#pragma once
/// \file classification.h
/// Multiclass classification metrics (scikit-learn's definitions, zero_division=0): Accuracy
/// (top-k), ConfusionMatrix, Precision, Recall, F1; decomposable int64 counts. update(preds,
/// target, is_padding): target [N] integer in [0, C); preds scores [N, C] floating (argmax, ties
/// to the lowest index) or labels [N] integer; mask [N]. Throws ConfigError (local): N or rank
/// mismatch, floating labels, a label out of range, C <= 0, a mask of the wrong length.

#include "rankwise/metrics/metric.h"

namespace rankwise::metrics {

/// How per-class values are combined.
enum class Average {
  /// From the counts summed over classes: sum(tp) / sum(tp + fp) etc. For
  /// single-label multiclass data micro precision = recall = F1 = accuracy.
  kMicro,
  /// Unweighted mean of the per-class values over the classes that occur in
  /// the targets or the predictions (scikit-learn's labels=None); a class
  /// whose ratio is 0/0 counts as 0 (zero_division=0).
  kMacro,
  /// No averaging: compute() returns the per-class values, float64 [num_classes]
  /// (0 where a ratio is 0/0).
  kNone,
};

/// Options of the classification metrics (setters and getters as torch::nn options), e.g.
/// ClassificationOptions(10).average(Average::kMicro).
struct ClassificationOptions {
  explicit ClassificationOptions(int64_t num_classes) : num_classes_(num_classes) {}
  /// Number of classes C (> 0).
  TORCH_ARG(int64_t, num_classes);
  /// Averaging of Precision/Recall/F1 (default kMacro). Ignored by Accuracy
  /// and ConfusionMatrix.
  TORCH_ARG(Average, average) = Average::kMacro;
  /// Accuracy only: a sample is correct when its target is among the k
  /// highest scores (default 1). k > 1 needs scores [N, C] and k <= C.
  TORCH_ARG(int64_t, top_k) = 1;
};

/// Fraction of correctly classified samples over every rank (sklearn accuracy_score; with
/// top_k, top_k_accuracy_score; ties as torch::topk). States: "correct", "total" int64 []
/// (kSum). compute(): 0-d float64, NaN when nothing was counted. Throws ConfigError from the
/// constructor when num_classes <= 0 or top_k is not in [1, num_classes].
class Accuracy : public Metric {
 public:
  explicit Accuracy(ClassificationOptions options);
  /// See this file's docs for shapes. Local.
  void update(const torch::Tensor& preds, const torch::Tensor& target,
              const PaddingMask& is_padding = {});
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
  /// The options given to the constructor.
  const ClassificationOptions& options() const { return options_; }

 private:
  ClassificationOptions options_;
};

/// Counts of (true class, predicted class) pairs: entry [i, j] is the number
/// of samples of class i predicted as j (rows true, columns predicted, as
/// sklearn confusion_matrix). State: "confmat" int64 [C, C] (kSum).
/// compute(): int64 [C, C]. Throws ConfigError when num_classes <= 0.
class ConfusionMatrix : public Metric {
 public:
  explicit ConfusionMatrix(ClassificationOptions options);
  /// See this file's docs for shapes. Local.
  void update(const torch::Tensor& preds, const torch::Tensor& target,
              const PaddingMask& is_padding = {});
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
  /// The options given to the constructor.
  const ClassificationOptions& options() const { return options_; }

 private:
  ClassificationOptions options_;
};

/// Shared base of Precision, Recall and F1: per-class true positives, false
/// positives and false negatives. States: "tp", "fp", "fn", each int64 [C]
/// (kSum); torchmetrics' StatScores convention.
class StatScores : public Metric {
 public:
  /// See this file's docs for shapes. Local.
  void update(const torch::Tensor& preds, const torch::Tensor& target,
              const PaddingMask& is_padding = {});
  /// The options given to the constructor.
  const ClassificationOptions& options() const { return options_; }

 protected:
  /// Throws ConfigError when num_classes <= 0.
  StatScores(std::string name, ClassificationOptions options);
  /// Per-class ratio num / den (0 where den == 0), then averaged as options().average_.
  /// `present`: classes occurring in targets or predictions (for kMacro).
  torch::Tensor average(const torch::Tensor& num, const torch::Tensor& den,
                        const StateMap& states) const;
  ClassificationOptions options_;
};

/// Precision tp / (tp + fp) (sklearn precision_score).
/// compute(): 0-d float64 (kMicro, kMacro) or float64 [C] (kNone); 0 when undefined.
class Precision : public StatScores {
 public:
  explicit Precision(ClassificationOptions options);
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
};

/// Recall tp / (tp + fn) (sklearn recall_score).
/// compute(): 0-d float64 (kMicro, kMacro) or float64 [C] (kNone); 0 when undefined.
class Recall : public StatScores {
 public:
  explicit Recall(ClassificationOptions options);
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
};

/// F1 = 2 tp / (2 tp + fp + fn), the harmonic mean of precision and recall
/// (sklearn f1_score; macro is the mean of the per-class F1, not the F1 of
/// the macro precision and recall).
/// compute(): 0-d float64 (kMicro, kMacro) or float64 [C] (kNone); 0 when undefined.
class F1 : public StatScores {
 public:
  explicit F1(ClassificationOptions options);
  /// The value from combined states (pure; see Metric::compute_from).
  torch::Tensor compute_from(const StateMap& states) const override;
};

}  // namespace rankwise::metrics
