// The cross-rank synchronisation of metric states: one all_reduce for every
// kSum/kMin/kMax state, two all_gathers for the kCat states.
#include "metrics/state_sync.h"

#include <fmt/format.h>

#include <algorithm>

#include "dist/all_gather_varlen.h"
#include "metrics/common.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::metrics {

namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// Every state travels as float64; integers are exact up to 2^53.
torch::Tensor as_double(const torch::Tensor& t, const Metric& metric, const std::string& state) {
  if (!t.is_floating_point() && t.numel() > 0 && t.scalar_type() != torch::kBool) {
    const double largest = t.abs().max().to(torch::kDouble).item<double>();
    if (largest > kMaxExactInteger) {
      throw Error(fmt::format("{}: state '{}' holds {:f}, beyond 2^53, which float64 cannot carry "
                              "exactly; reset() the metric more often",
                              context(metric.name(), "compute"), state, largest));
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

// Which states travel in the all_reduce (kSum, kMin, kMax) and which are
// gathered (kCat), with their local values.
void plan_slots(const std::vector<const Metric*>& metrics,
                const std::vector<Metric::StateMap>& local, std::vector<Slot>& reduced,
                std::vector<Slot>& gathered) {
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    for (const auto& spec : metrics[i]->state_specs()) {
      Slot slot{i, &spec, local[i].at(spec.name)};
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
}

// 1. One all_reduce (sum) of one flat float64 buffer for every kSum, kMin
// and kMax state. A kMin/kMax state takes `world` segments: rank r writes
// its value into segment r and zeros elsewhere, so the sum delivers every
// rank's value, and the minimum/maximum is taken on arrival.
void reduce_slots(dist::ProcessGroup& pg, const std::vector<const Metric*>& metrics,
                  std::vector<Slot>& reduced, std::vector<Metric::StateMap>& out,
                  SyncStats& stats) {
  const int64_t world = pg.world_size();
  int64_t total = 0;
  for (auto& slot : reduced) {
    slot.offset = total;
    slot.width = slot.spec->reduction == Reduction::kSum ? slot.numel : slot.numel * world;
    total += slot.width;
  }
  auto buffer = torch::zeros({total}, torch::kDouble);
  for (auto& slot : reduced) {
    auto flat = as_double(slot.local, *metrics[slot.metric], slot.spec->name);
    const int64_t at = slot.spec->reduction == Reduction::kSum
                           ? slot.offset
                           : slot.offset + pg.rank() * slot.numel;
    buffer.narrow(0, at, slot.numel).copy_(flat);
  }
  pg.all_reduce(buffer, dist::ReduceOp::kSum);
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
void gather_slots(dist::ProcessGroup& pg, const std::vector<const Metric*>& metrics,
                  const std::vector<Slot>& gathered, std::vector<Metric::StateMap>& out,
                  SyncStats& stats) {
  std::vector<int64_t> lengths;  // elements: rows times the elements of one row
  for (const auto& slot : gathered) lengths.push_back(slot.local.size(0) * slot.numel);
  dist::VarlenGatherStats issued;
  const auto all = dist::all_gather_varlen(
      pg, lengths, torch::kDouble,
      [&](std::size_t j) {
        const auto& slot = gathered[j];
        return as_double(slot.local, *metrics[slot.metric], slot.spec->name);
      },
      &issued);
  stats.all_gather += issued.all_gathers;
  stats.elements += issued.elements;
  for (std::size_t j = 0; j < gathered.size() && !all.empty(); ++j) {
    const auto& slot = gathered[j];
    std::vector<torch::Tensor> parts;
    for (int64_t r = 0; r < pg.world_size(); ++r)
      parts.push_back(all[static_cast<std::size_t>(r)][j]);
    std::vector<int64_t> shape = slot.spec->default_value.sizes().vec();
    shape[0] = -1;
    out[slot.metric][slot.spec->name] =
        torch::cat(parts, 0).view(shape).to(slot.spec->default_value.scalar_type());
  }
}

}  // namespace

std::vector<Metric::StateMap> sync_states(const std::vector<const Metric*>& metrics,
                                          SyncStats& stats) {
  std::vector<Metric::StateMap> out;
  out.reserve(metrics.size());
  for (const auto* m : metrics) out.push_back(m->local_states());
  if (!dist::is_initialized()) return out;
  auto& pg = dist::process_group();
  if (pg.world_size() == 1) return out;
  std::vector<Slot> reduced, gathered;
  plan_slots(metrics, out, reduced, gathered);
  if (!reduced.empty()) reduce_slots(pg, metrics, reduced, out, stats);
  if (!gathered.empty()) gather_slots(pg, metrics, gathered, out, stats);
  return out;
}

}  // namespace rankwise::metrics
