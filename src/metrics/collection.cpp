// MetricCollection: named metrics computed with the fewest collectives.
#include "rankwise/metrics/collection.h"

#include "metrics/common.h"
#include "metrics/state_sync.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"

namespace rankwise::metrics {

void MetricCollection::add_metric(const std::string& name, std::shared_ptr<Metric> metric) {
  const std::string where = context("MetricCollection", "add");
  if (name.empty()) fail(where, "the metric name is empty; give every metric a unique name");
  if (name.find('.') != std::string::npos) {
    fail(where, "the metric name '" + name + "' contains '.', which separates name and state in state()");
  }
  if (!metric) fail(where, "metric '" + name + "' is null");
  for (const auto& entry : metrics_) {
    if (entry.first == name) fail(where, "a metric named '" + name + "' exists already");
  }
  metrics_.emplace_back(name, std::move(metric));
}

std::map<std::string, torch::Tensor> MetricCollection::compute(std::source_location site) {
  const dist::CallerSite caller(site);
  std::vector<const Metric*> all;
  for (const auto& entry : metrics_) all.push_back(entry.second.get());
  SyncStats stats;
  auto states = sync_states(all, stats);
  last_sync_ = stats;
  std::map<std::string, torch::Tensor> result;
  for (std::size_t i = 0; i < metrics_.size(); ++i) {
    result[metrics_[i].first] = metrics_[i].second->compute_from(states[i]);
  }
  return result;
}

void MetricCollection::reset() {
  for (auto& entry : metrics_) entry.second->reset();
}

c10::Dict<std::string, torch::Tensor> MetricCollection::state() const {
  c10::Dict<std::string, torch::Tensor> result;
  for (const auto& entry : metrics_) {
    for (const auto& s : entry.second->state()) result.insert(entry.first + "." + s.key(), s.value());
  }
  return result;
}

std::map<std::string, c10::Dict<std::string, torch::Tensor>> MetricCollection::split_state(
    const std::string& where, const c10::Dict<std::string, torch::Tensor>& state) const {
  std::map<std::string, c10::Dict<std::string, torch::Tensor>> parts;
  for (const auto& entry : metrics_) parts.emplace(entry.first, c10::Dict<std::string, torch::Tensor>());
  for (const auto& s : state) {
    const auto dot = s.key().find('.');
    const std::string prefix = dot == std::string::npos ? s.key() : s.key().substr(0, dot);
    auto it = parts.find(prefix);
    if (dot == std::string::npos || it == parts.end()) {
      fail(where, "entry '" + s.key() + "' belongs to no metric of this collection; add the same "
                  "metrics under the same names before loading");
    }
    it->second.insert(s.key().substr(dot + 1), s.value());
  }
  return parts;
}

c10::Dict<std::string, torch::Tensor> MetricCollection::merge_states(
    const std::vector<c10::Dict<std::string, torch::Tensor>>& states) const {
  const std::string where = context("MetricCollection", "merge_states");
  std::vector<std::map<std::string, c10::Dict<std::string, torch::Tensor>>> split;
  for (const auto& state : states) split.push_back(split_state(where, state));
  c10::Dict<std::string, torch::Tensor> merged;
  for (const auto& entry : metrics_) {
    std::vector<c10::Dict<std::string, torch::Tensor>> parts;
    for (const auto& s : split) parts.push_back(s.at(entry.first));
    for (const auto& s : entry.second->merge_states(parts)) {
      merged.insert(entry.first + "." + s.key(), s.value());
    }
  }
  return merged;
}

void MetricCollection::load_state(const c10::Dict<std::string, torch::Tensor>& state) {
  const std::string where = context("MetricCollection", "load_state");
  auto parts = split_state(where, state);
  // Metric::load_state validates before it changes anything; validate all first.
  for (auto& entry : metrics_) {
    for (const auto& spec : entry.second->state_specs()) {
      if (!parts.at(entry.first).contains(spec.name)) {
        fail(where, "entry '" + entry.first + "." + spec.name + "' is missing");
      }
    }
  }
  for (auto& entry : metrics_) entry.second->load_state(parts.at(entry.first));
}

Metric& MetricCollection::at(const std::string& name) {
  for (auto& entry : metrics_) {
    if (entry.first == name) return *entry.second;
  }
  fail(context("MetricCollection", "at"), "no metric named '" + name + "'");
}

}  // namespace rankwise::metrics
