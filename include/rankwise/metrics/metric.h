#pragma once
/// \file metric.h
/// The base of every distributed metric (torchmetrics' model): states, each with a
/// Reduction that combines every rank's; update() is local (any rank; inputs copied to the
/// CPU), compute() is collective and computes once from the combined states. Counts int64,
/// sums float64 (exact to 2^53). With no process group or world size 1 nothing is sent.
/// See docs/metrics.md.

#include <ATen/core/Dict.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <source_location>
#include <string>
#include <vector>

#include "rankwise/metrics/padding_mask.h"  // update()'s `is_padding` argument

namespace rankwise::metrics {

/// How a state is combined across ranks: kSum, kMin, kMax element-wise; kCat concatenates
/// along dim 0 in rank order (torchmetrics' dist_reduce_fx). See docs/metrics.md.
enum class Reduction { kSum, kMin, kMax, kCat };

/// Collectives a compute() issued (for tests and benchmarks).
struct SyncStats {
  int64_t all_reduce = 0;  ///< number of all_reduce calls
  int64_t all_gather = 0;  ///< number of all_gather calls
  int64_t elements = 0;    ///< float64 elements sent by this rank, all calls together
};

/// Base class of the metrics. Not copyable (states are tensors; a copy would
/// alias them); hold metrics by value or by std::shared_ptr.
///
/// Every rank must hold the same metrics, constructed with the same options,
/// and call compute() in the same order: the states' shapes must agree.
class Metric {
 public:
  /// One registered state.
  struct StateSpec {
    std::string name;
    Reduction reduction;
    torch::Tensor default_value;  ///< value after reset(); for kCat an empty [0, ...] tensor
  };

  /// `name` is used in error messages (e.g. "Accuracy").
  explicit Metric(std::string name);
  virtual ~Metric() = default;
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  /// The value over every sample any rank passed to update() since reset(): states combined
  /// across ranks, then computed once, so every rank gets the same value at any world size.
  /// The local state is unchanged. Collective: every rank, same order (with a process group).
  /// Shape and dtype per metric (most: 0-d float64). Throws Error when a collective fails.
  torch::Tensor compute(std::source_location site = std::source_location::current());

  /// Restores every state to its default (local; no communication).
  void reset();

  /// This rank's states (not yet combined), cloned: name -> tensor. kCat
  /// states are concatenated along dim 0. Save it in a checkpoint, one entry
  /// per rank (the states are sharded: every rank holds its own part).
  c10::Dict<std::string, torch::Tensor> state() const;
  /// Restores what state() returned, on the same rank. Throws ConfigError when
  /// a state is missing or its shape differs (construct the metric with the
  /// same options as the one that was saved).
  void load_state(const c10::Dict<std::string, torch::Tensor>& state);

  /// Combines states that state() returned on several ranks (e.g. of a run at another world
  /// size), each by its reduction (kCat in the order given); loaded on one rank, with reset()
  /// on the others, compute() gives the saved ranks' value. Empty list: the default state.
  /// Local. Throws ConfigError naming the part whose state is missing or misshaped.
  c10::Dict<std::string, torch::Tensor> merge_states(
      const std::vector<c10::Dict<std::string, torch::Tensor>>& states) const;

  /// True when no state is kCat, so one all_reduce combines it.
  bool is_decomposable() const;
  /// The registered states, in registration order.
  const std::vector<StateSpec>& state_specs() const { return specs_; }
  /// The metric's kind, e.g. "Accuracy" (used in error messages).
  const std::string& name() const { return name_; }
  /// Collectives issued by the last compute() of this metric.
  const SyncStats& last_sync() const { return last_sync_; }

  /// Combined states by name (kCat states concatenated): the input of compute_from().
  using StateMap = std::map<std::string, torch::Tensor>;

  /// Computes the value from already combined states. Pure: no communication.
  /// Public so that MetricCollection and tests can call it.
  virtual torch::Tensor compute_from(const StateMap& states) const = 0;
  /// This rank's states as compute_from() takes them (kCat concatenated).
  StateMap local_states() const;

 protected:
  /// Registers a state. kSum/kMin/kMax states keep the default's shape and
  /// dtype (use int64 for counts, float64 for sums); kCat states must have a
  /// default of shape [0, ...] and grow along dim 0. Call from the constructor.
  void add_state(const std::string& name, torch::Tensor default_value, Reduction reduction);
  /// The current tensor of a kSum/kMin/kMax state, to update in place.
  torch::Tensor& state_tensor(const std::string& name);
  /// Appends rows (shape [n, ...] matching the default's trailing shape) to a kCat state.
  void append_state(const std::string& name, const torch::Tensor& rows);

 private:
  std::string name_;
  std::vector<StateSpec> specs_;
  std::map<std::string, torch::Tensor> values_;                 // kSum/kMin/kMax
  std::map<std::string, std::vector<torch::Tensor>> chunks_;    // kCat
  SyncStats last_sync_;
};

}  // namespace rankwise::metrics
