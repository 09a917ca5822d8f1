#pragma once
/// \file collection.h
/// Several metrics computed together with the fewest collectives:
/// torchmetrics.MetricCollection, with its compute groups replaced by one
/// flat buffer.

#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "rankwise/metrics/metric.h"

namespace rankwise::metrics {

/// Named metrics computed together: compute() combines every decomposable metric's states in
/// ONE all_reduce of a flat float64 buffer, and the kCat states of the others (AUROC) in two
/// shared all_gathers (lengths, then data); last_sync() reports the count. update() stays per
/// metric: keep the shared_ptr add() returns and update through it.
class MetricCollection {
 public:
  MetricCollection() = default;

  /// Adds `metric` under `name` (unique, non-empty; used as the key of
  /// compute() and the prefix "name." of state()). Returns `metric`.
  /// Throws ConfigError on an empty or duplicate name or a null metric.
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> metric) {
    add_metric(name, metric);
    return metric;
  }

  /// The value of every metric, by name (see Metric::compute()). Collective:
  /// every rank, same order, every rank holding the same metrics.
  std::map<std::string, torch::Tensor> compute(std::source_location site = std::source_location::current());
  /// reset() of every metric. Local.
  void reset();
  /// Every metric's state() under keys "name.state" (this rank's part). Local.
  c10::Dict<std::string, torch::Tensor> state() const;
  /// Restores state(). Throws ConfigError when an entry is missing or its shape differs.
  void load_state(const c10::Dict<std::string, torch::Tensor>& state);
  /// Combines what state() returned on several ranks into one state, each
  /// metric by Metric::merge_states(): loaded on one rank, with reset() on
  /// the others, compute() gives what those ranks would have computed
  /// together (how a checkpoint's metric states follow a change of world
  /// size). Local. Throws ConfigError when an entry is missing, belongs to no
  /// metric of this collection, or has another shape.
  c10::Dict<std::string, torch::Tensor> merge_states(
      const std::vector<c10::Dict<std::string, torch::Tensor>>& states) const;

  /// The metric added under `name`; throws ConfigError when there is none.
  Metric& at(const std::string& name);
  std::size_t size() const { return metrics_.size(); }
  /// Collectives issued by the last compute().
  const SyncStats& last_sync() const { return last_sync_; }

 private:
  // state() entries "name.state" by metric name; ConfigError for an entry
  // that belongs to no metric.
  std::map<std::string, c10::Dict<std::string, torch::Tensor>> split_state(
      const std::string& where, const c10::Dict<std::string, torch::Tensor>& state) const;
  void add_metric(const std::string& name, std::shared_ptr<Metric> metric);
  std::vector<std::pair<std::string, std::shared_ptr<Metric>>> metrics_;
  SyncStats last_sync_;
};

}  // namespace rankwise::metrics
