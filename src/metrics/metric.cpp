// Metric base, PaddingMask, the cross-rank synchronisation of states, and
// MetricCollection.
#include "rankwise/metrics/metric.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "metrics/detail/common.h"
#include "rankwise/error.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/process_group.h"

namespace rankwise {
namespace metrics {

using detail::context;
using detail::fail;
using detail::shape_of;

// ---------------------------------------------------------------- PaddingMask

PaddingMask::PaddingMask(torch::Tensor is_padding) {
  if (!is_padding.defined()) return;
  const std::string where = context("PaddingMask", "PaddingMask");
  if (is_padding.dim() != 1) {
    fail(where, "the padding mask must be 1-D [N] (one entry per sample), got shape " +
                    shape_of(is_padding));
  }
  is_padding = is_padding.to(torch::kCPU);
  if (is_padding.scalar_type() != torch::kBool) {
    if (is_padding.is_floating_point() || is_padding.is_complex()) {
      fail(where, "the padding mask must be a bool tensor (true = padding), got dtype " +
                      detail::dtype_of(is_padding));
    }
    if (is_padding.numel() > 0 &&
        (is_padding.min().item<int64_t>() < 0 || is_padding.max().item<int64_t>() > 1)) {
      fail(where, "an integer padding mask may hold only 0 and 1; pass a bool tensor");
    }
    is_padding = is_padding.to(torch::kBool);
  }
  mask_ = is_padding;
}

PaddingMask::PaddingMask(const std::vector<bool>& is_padding)
    : PaddingMask(is_padding, 0, static_cast<int64_t>(is_padding.size())) {}

PaddingMask::PaddingMask(const std::vector<bool>& shard_is_padding, int64_t offset,
                         int64_t length) {
  const auto size = static_cast<int64_t>(shard_is_padding.size());
  if (offset < 0 || length < 0 || offset + length > size) {
    fail(context("PaddingMask", "PaddingMask"),
         "range [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
             ") is outside the mask of " + std::to_string(size) +
             " entries; pass the batch's offset and length within the shard");
  }
  mask_ = torch::empty({length}, torch::kBool);
  auto* data = mask_.data_ptr<bool>();
  for (int64_t i = 0; i < length; ++i) data[i] = shard_is_padding[static_cast<size_t>(offset + i)];
}

torch::Tensor PaddingMask::keep(int64_t n, const std::string& who) const {
  if (empty()) return torch::ones({n}, torch::kBool);
  if (mask_.size(0) != n) {
    throw ConfigError(who + ": the padding mask has " + std::to_string(mask_.size(0)) +
                      " entries but the batch has " + std::to_string(n) +
                      " samples; pass the part of DistributedSampler::is_padding() that "
                      "matches this batch (PaddingMask(mask, offset, length))");
  }
  return mask_.logical_not();
}

// ---------------------------------------------------------------- Metric

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
      fail(where, "state '" + spec.name + "' is missing; pass what state() of the same metric returned");
    }
    torch::Tensor t = state.at(spec.name).to(torch::kCPU);
    const auto expected = spec.default_value.sizes();
    bool ok = t.dim() == spec.default_value.dim();
    if (ok) {
      const int64_t first = spec.reduction == Reduction::kCat ? 1 : 0;
      for (int64_t d = first; d < t.dim(); ++d) ok = ok && t.size(d) == expected[d];
    }
    if (!ok) {
      fail(where, "state '" + spec.name + "' has shape " + shape_of(t) + " but this metric expects " +
                      shape_of(spec.default_value) +
                      (spec.reduction == Reduction::kCat ? " (any length along dim 0)" : "") +
                      "; construct the metric with the options it was saved with");
    }
    loaded[spec.name] = t.to(spec.default_value.scalar_type()).clone();
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

torch::Tensor Metric::compute() {
  SyncStats stats;
  auto states = detail::sync_states({this}, stats);
  last_sync_ = stats;
  return compute_from(states.front());
}

// ---------------------------------------------------------------- synchronisation

namespace detail {
namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// Every state travels as float64; integers are exact up to 2^53.
torch::Tensor as_double(const torch::Tensor& t, const Metric& metric, const std::string& state) {
  if (!t.is_floating_point() && t.numel() > 0 && t.scalar_type() != torch::kBool) {
    const double largest = t.abs().max().to(torch::kDouble).item<double>();
    if (largest > kMaxExactInteger) {
      throw Error(context(metric.name(), "compute") + ": state '" + state + "' holds " +
                  std::to_string(largest) +
                  ", beyond 2^53, which float64 cannot carry exactly; reset() the metric more often");
    }
  }
  return t.to(torch::kDouble).reshape({-1});
}

struct Slot {
  std::size_t metric;
  const Metric::StateSpec* spec;
  torch::Tensor local;
  int64_t offset = 0;
  int64_t numel = 0;   // elements of the local state (kCat: of one row)
  int64_t width = 0;   // elements in the buffer
};

}  // namespace

std::vector<Metric::StateMap> sync_states(const std::vector<const Metric*>& metrics,
                                          SyncStats& stats) {
  std::vector<Metric::StateMap> out;
  out.reserve(metrics.size());
  for (const auto* m : metrics) out.push_back(m->local_states());
  if (!rankwise::is_initialized()) return out;
  auto& pg = rankwise::process_group();
  const int64_t world = pg.world_size();
  const int64_t rank = pg.rank();
  if (world == 1) return out;

  std::vector<Slot> reduced, gathered;
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    for (const auto& spec : metrics[i]->state_specs()) {
      Slot slot{i, &spec, out[i].at(spec.name)};
      if (spec.reduction == Reduction::kCat) {
        int64_t row = 1;  // elements of one row: the product of the trailing dims
        for (int64_t d = 1; d < spec.default_value.dim(); ++d) row *= spec.default_value.size(d);
        slot.numel = row;
        gathered.push_back(slot);
      } else {
        slot.numel = slot.local.numel();
        reduced.push_back(slot);
      }
    }
  }

  // 1. One all_reduce (sum) of one flat float64 buffer for every kSum, kMin
  // and kMax state. A kMin/kMax state takes `world` segments: rank r writes
  // its value into segment r and zeros elsewhere, so the sum delivers every
  // rank's value, and the minimum/maximum is taken on arrival.
  if (!reduced.empty()) {
    int64_t total = 0;
    for (auto& slot : reduced) {
      slot.offset = total;
      slot.width = slot.spec->reduction == Reduction::kSum ? slot.numel : slot.numel * world;
      total += slot.width;
    }
    auto buffer = torch::zeros({total}, torch::kDouble);
    for (auto& slot : reduced) {
      auto flat = as_double(slot.local, *metrics[slot.metric], slot.spec->name);
      const int64_t at = slot.spec->reduction == Reduction::kSum ? slot.offset
                                                                 : slot.offset + rank * slot.numel;
      buffer.narrow(0, at, slot.numel).copy_(flat);
    }
    pg.all_reduce(buffer, rankwise::ReduceOp::kSum);
    stats.all_reduce += 1;
    stats.elements += total;
    for (auto& slot : reduced) {
      auto part = buffer.narrow(0, slot.offset, slot.width);
      torch::Tensor value;
      switch (slot.spec->reduction) {
        case Reduction::kSum: value = part; break;
        case Reduction::kMin: value = part.view({world, slot.numel}).amin(0); break;
        case Reduction::kMax: value = part.view({world, slot.numel}).amax(0); break;
        case Reduction::kCat: break;
      }
      out[slot.metric][slot.spec->name] =
          value.reshape(slot.local.sizes()).to(slot.spec->default_value.scalar_type());
    }
  }

  // 2. kCat states: all_gather the lengths, then one all_gather of every
  // state padded to the longest shard; trimmed on arrival.
  if (!gathered.empty()) {
    const auto k = static_cast<int64_t>(gathered.size());
    auto lengths = torch::empty({k}, torch::kLong);
    for (int64_t j = 0; j < k; ++j) lengths[j] = gathered[static_cast<size_t>(j)].local.size(0);
    auto all_lengths = pg.all_gather(lengths);
    stats.all_gather += 1;
    stats.elements += k;
    std::vector<std::vector<int64_t>> len(static_cast<size_t>(world), std::vector<int64_t>(k));
    for (int64_t r = 0; r < world; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        len[static_cast<size_t>(r)][static_cast<size_t>(j)] = all_lengths[static_cast<size_t>(r)][j].item<int64_t>();
      }
    }
    int64_t total = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t longest = 0;
      for (int64_t r = 0; r < world; ++r) longest = std::max(longest, len[static_cast<size_t>(r)][static_cast<size_t>(j)]);
      auto& slot = gathered[static_cast<size_t>(j)];
      slot.offset = total;
      slot.width = longest * slot.numel;
      total += slot.width;
    }
    if (total > 0) {  // every rank sees the same lengths, so all take this branch or none
      auto buffer = torch::zeros({total}, torch::kDouble);
      for (auto& slot : gathered) {
        auto flat = as_double(slot.local, *metrics[slot.metric], slot.spec->name);
        buffer.narrow(0, slot.offset, flat.numel()).copy_(flat);
      }
      auto all = pg.all_gather(buffer);
      stats.all_gather += 1;
      stats.elements += total;
      for (int64_t j = 0; j < k; ++j) {
        auto& slot = gathered[static_cast<size_t>(j)];
        std::vector<torch::Tensor> parts;
        for (int64_t r = 0; r < world; ++r) {
          const int64_t n = len[static_cast<size_t>(r)][static_cast<size_t>(j)];
          parts.push_back(all[static_cast<size_t>(r)].narrow(0, slot.offset, n * slot.numel));
        }
        std::vector<int64_t> shape = slot.spec->default_value.sizes().vec();
        shape[0] = -1;
        out[slot.metric][slot.spec->name] =
            torch::cat(parts, 0).view(shape).to(slot.spec->default_value.scalar_type());
      }
    }
  }
  return out;
}

}  // namespace detail

// ---------------------------------------------------------------- MetricCollection

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

std::map<std::string, torch::Tensor> MetricCollection::compute() {
  std::vector<const Metric*> all;
  for (const auto& entry : metrics_) all.push_back(entry.second.get());
  SyncStats stats;
  auto states = detail::sync_states(all, stats);
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

void MetricCollection::load_state(const c10::Dict<std::string, torch::Tensor>& state) {
  const std::string where = context("MetricCollection", "load_state");
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

}  // namespace metrics
}  // namespace rankwise
