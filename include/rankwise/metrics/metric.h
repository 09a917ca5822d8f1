#pragma once
/// \file metric.h
/// The base of every distributed metric: a local update(), a collective
/// compute(), reset(), and a state that goes into a checkpoint.
///
/// The model is torchmetrics' (torchmetrics.Metric, `add_state(name, default,
/// dist_reduce_fx)`): a metric keeps *states* (tensors), each with a reduction
/// that combines the states of every rank:
///
/// | Reduction | combines                     | torchmetrics dist_reduce_fx |
/// |-----------|------------------------------|-----------------------------|
/// | kSum      | element-wise sum             | "sum"                       |
/// | kMin      | element-wise minimum         | "min"                       |
/// | kMax      | element-wise maximum         | "max"                       |
/// | kCat      | concatenation along dim 0, in rank order | "cat"           |
///
/// The value is computed once from the combined states ("reduce the sum and
/// the count, then divide once"; never average the per-rank averages).
/// A metric whose states are all kSum/kMin/kMax is *decomposable*: it costs
/// one all_reduce however many states it has (a MetricCollection packs all of
/// its decomposable metrics into that one all_reduce). kCat states (AUROC)
/// are gathered: an all_gather of the per-rank lengths, then one all_gather of
/// the data padded to the longest shard, trimmed on arrival.
///
/// Counts are int64 and sums float64, never float32. For the all_reduce every
/// state travels as float64, which is exact for integers up to 2^53; a count
/// beyond that makes compute() throw Error.
///
/// Single process (rankwise::dist::is_initialized() is false, or the world size is
/// 1): compute() computes from the local state and communicates nothing.
///
/// States live on the CPU (Gloo reduces CPU tensors); update() copies inputs
/// from another device. update() is local (any rank, no communication), so it
/// may run inside loops whose length differs between ranks (evaluation shards
/// without padding); compute() must then come after the loop, on every rank.
///
/// Usage:
/// \code
///   MetricCollection metrics;
///   auto acc = metrics.add("acc", std::make_shared<Accuracy>(ClassificationOptions(10)));
///   auto loss = metrics.add("loss", std::make_shared<Mean>());
///   for (...) {  // this rank's batches; `pad` = sampler.is_padding() of the batch
///     acc->update(logits, labels, pad);
///     loss->update(per_sample_loss, pad);
///   }
///   auto values = metrics.compute();  // every rank: one all_reduce, same values
///   print0("acc {:.4f} loss {:.4f}", values["acc"].item<double>(), values["loss"].item<double>());
/// \endcode

#include <ATen/core/Dict.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rankwise/metrics/padding_mask.h"  // update()'s `is_padding` argument

namespace rankwise::metrics {

/// How a state is combined across ranks (see the table in this file's docs).
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

  /// The value over every sample that any rank passed to update() since the
  /// last reset(): the states are combined across ranks first, then the value
  /// is computed once, so every rank gets the same value (bit for bit) and it
  /// does not depend on the world size. The local state is not changed;
  /// update() may continue afterwards.
  /// Collective: every rank, same order (when a process group is initialized).
  /// Shape and dtype depend on the metric (documented there); most return a
  /// 0-d float64 tensor. Throws Error when a collective fails.
  torch::Tensor compute();

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

  /// Combines states that state() returned on several ranks (e.g. every
  /// rank of a run that had another world size) into one, each state with
  /// its own reduction (kSum adds, kMin and kMax take the element-wise
  /// extreme, kCat concatenates in the order given): loaded on one rank, with
  /// reset() on the others, it makes compute() return the value the saved
  /// ranks would have computed together (torchmetrics' dist_reduce_fx,
  /// applied locally). An empty list gives the default state. Local, no
  /// communication. Throws ConfigError naming the part when a state is
  /// missing or its shape differs from this metric's.
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
