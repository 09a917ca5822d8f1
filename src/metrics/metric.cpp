// Metric: registered states, reset, state()/load_state(), compute().
#include "rankwise/metrics/metric.h"
#include "util/text.h"

#include <fmt/format.h>
#include <algorithm>
#include <set>

#include "metrics/common.h"
#include "metrics/state_sync.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"

namespace rankwise::metrics {

namespace {

// `t` on the CPU in the spec's dtype, or ConfigError when its shape is not the
// spec's (kCat: any length along dim 0). `part` names it in the message.
torch::Tensor checked_state(const std::string& where, const Metric::StateSpec& spec,
                            const torch::Tensor& value, const std::string& part) {
  torch::Tensor t = value.to(torch::kCPU);
  const auto expected = spec.default_value.sizes();
  bool ok = t.dim() == spec.default_value.dim();
  if (ok) {
    const int64_t first = spec.reduction == Reduction::kCat ? 1 : 0;
    for (int64_t d = first; d < t.dim(); ++d) ok = ok && t.size(d) == expected[d];
  }
  if (!ok) {
    fail(where, "state '" + spec.name + "'" + part + " has shape " + shape_of(t) +
                    " but this metric expects " + shape_of(spec.default_value) +
                    (spec.reduction == Reduction::kCat ? " (any length along dim 0)" : "") +
                    "; construct the metric with the options it was saved with");
  }
  return t.to(spec.default_value.scalar_type());
}

}  // namespace

Metric::Metric(std::string name) : name_(std::move(name)) {}

void Metric::add_state(const std::string& name, torch::Tensor default_value,
                       Reduction reduction) {
  for (const auto& spec : specs_) {
    if (spec.name == name) fail(context(name_, "add_state"), "state '" + name + "' exists already");
  }
  default_value = default_value.to(torch::kCPU).clone();
  if (reduction == Reduction::kCat) {
    if (default_value.dim() < 1 || default_value.size(0) != 0) {
      fail(context(name_, "add_state"),
           "the default of a kCat state must have shape [0, ...], got " + shape_of(default_value));
    }
    chunks_[name] = {};
  } else {
    values_[name] = default_value.clone();
  }
  specs_.push_back({name, reduction, default_value});
}

torch::Tensor& Metric::state_tensor(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw Error(context(name_, "state_tensor") + ": no kSum/kMin/kMax state named '" + name + "'");
  }
  return it->second;
}

void Metric::append_state(const std::string& name, const torch::Tensor& rows) {
  auto it = chunks_.find(name);
  if (it == chunks_.end()) {
    throw Error(context(name_, "append_state") + ": no kCat state named '" + name + "'");
  }
  for (const auto& spec : specs_) {
    if (spec.name != name) continue;
    if (rows.dim() != spec.default_value.dim() ||
        rows.sizes().slice(1) != spec.default_value.sizes().slice(1)) {
      throw Error(context(name_, "append_state") + ": rows of shape " + shape_of(rows) +
                  " do not match state '" + name + "' of shape " + shape_of(spec.default_value));
    }
    if (rows.size(0) > 0) {
      it->second.push_back(rows.to(torch::kCPU, spec.default_value.scalar_type()).contiguous());
    }
  }
}

void Metric::reset() {
  for (const auto& spec : specs_) {
    if (spec.reduction == Reduction::kCat) {
      chunks_[spec.name].clear();
    } else {
      values_[spec.name] = spec.default_value.clone();
    }
  }
}

Metric::StateMap Metric::local_states() const {
  StateMap result;
  for (const auto& spec : specs_) {
    if (spec.reduction == Reduction::kCat) {
      const auto& chunks = chunks_.at(spec.name);
      if (chunks.empty()) {
        result[spec.name] = spec.default_value;
      } else if (chunks.size() == 1) {
        result[spec.name] = chunks.front();
      } else {
        result[spec.name] = torch::cat(chunks, 0);
      }
    } else {
      result[spec.name] = values_.at(spec.name);
    }
  }
  return result;
}

bool Metric::is_decomposable() const {
  return std::none_of(specs_.begin(), specs_.end(),
                      [](const StateSpec& s) { return s.reduction == Reduction::kCat; });
}

c10::Dict<std::string, torch::Tensor> Metric::state() const {
  c10::Dict<std::string, torch::Tensor> result;
  for (const auto& entry : local_states()) result.insert(entry.first, entry.second.clone());
  return result;
}

void Metric::load_state(const c10::Dict<std::string, torch::Tensor>& state) {
  const std::string where = context(name_, "load_state");
  std::set<std::string> known;
  for (const auto& spec : specs_) known.insert(spec.name);
  for (const auto& entry : state) {
    if (!known.count(entry.key())) {
      fail(where, "unexpected state '" + entry.key() +
                      "'; was the state saved from a different metric?");
    }
  }
  // Validate everything before changing anything.
  std::map<std::string, torch::Tensor> loaded;
  for (const auto& spec : specs_) {
    if (!state.contains(spec.name)) {
      fail(where,
           "state '" + spec.name + "' is missing; pass what state() of the same metric returned");
    }
    loaded[spec.name] = checked_state(where, spec, state.at(spec.name), "").clone();
  }
  for (const auto& spec : specs_) {
    if (spec.reduction == Reduction::kCat) {
      chunks_[spec.name].clear();
      if (loaded[spec.name].size(0) > 0) chunks_[spec.name].push_back(loaded[spec.name]);
    } else {
      values_[spec.name] = loaded[spec.name];
    }
  }
}

c10::Dict<std::string, torch::Tensor> Metric::merge_states(
    const std::vector<c10::Dict<std::string, torch::Tensor>>& states) const {
  const std::string where = context(name_, "merge_states");
  for (std::size_t i = 0; i < states.size(); ++i) {
    for (const auto& entry : states[i]) {
      const bool known = std::any_of(specs_.begin(), specs_.end(),
                                     [&](const StateSpec& s) { return s.name == entry.key(); });
      if (!known) {
        fail(where,
             fmt::format(
                 "unexpected state '{}' in part {}; was the state saved from a different metric?",
                 entry.key(), i));
      }
    }
  }
  c10::Dict<std::string, torch::Tensor> merged;
  for (const auto& spec : specs_) {
    std::vector<torch::Tensor> parts;
    for (std::size_t i = 0; i < states.size(); ++i) {
      const std::string part = fmt::format(" of part {} of {}", i, states.size());
      if (!states[i].contains(spec.name)) {
        fail(where, "state '" + spec.name + "' is missing" + part +
                        "; pass what state() of the same metric returned on each rank");
      }
      parts.push_back(checked_state(where, spec, states[i].at(spec.name), part));
    }
    torch::Tensor combined = parts.empty() ? spec.default_value.clone() : parts.front().clone();
    for (std::size_t i = 1; i < parts.size(); ++i) {
      switch (spec.reduction) {
        case Reduction::kSum: combined.add_(parts[i]); break;
        case Reduction::kMin: combined = torch::minimum(combined, parts[i]); break;
        case Reduction::kMax: combined = torch::maximum(combined, parts[i]); break;
        case Reduction::kCat: combined = torch::cat({combined, parts[i]}, 0); break;
      }
    }
    merged.insert(spec.name, combined);
  }
  return merged;
}

torch::Tensor Metric::compute(std::source_location site) {
  const dist::CallerSite caller(site);
  SyncStats stats;
  auto states = sync_states({this}, stats);
  last_sync_ = stats;
  return compute_from(states.front());
}

}  // namespace rankwise::metrics
