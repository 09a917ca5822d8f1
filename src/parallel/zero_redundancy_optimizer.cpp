#include "rankwise/parallel/zero_redundancy_optimizer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/utils.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string_view>

#include "dist/all_gather_ivalues.h"
#include "parallel/grad_norm.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::parallel {

std::vector<int> zero_partition(const std::vector<std::vector<int64_t>>& group_numels,
                                int world_size) {
  if (world_size < 1) {
    throw ConfigError(fmt::format("zero_partition: world size {} must be at least 1", world_size));
  }
  std::vector<int> owner;
  std::vector<int64_t> totals(static_cast<std::size_t>(world_size), 0);
  for (const auto& numels : group_numels) {
    const std::size_t first = owner.size();
    owner.resize(first + numels.size(), 0);
    std::vector<std::size_t> order(numels.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return numels[a] > numels[b]; });
    for (const std::size_t i : order) {
      const auto least = std::min_element(totals.begin(), totals.end());  // first of the least
      *least += numels[i];
      owner[first + i] = static_cast<int>(least - totals.begin());
    }
  }
  return owner;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<torch::Tensor> params,
                                                 Factory make_optimizer) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(params));
  init(std::move(groups), make_optimizer);
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(
    std::vector<torch::optim::OptimizerParamGroup> groups, Factory make_optimizer) {
  init(std::move(groups), make_optimizer);
}

void ZeroRedundancyOptimizer::init(std::vector<torch::optim::OptimizerParamGroup> groups,
                                   Factory& make_optimizer) {
  std::vector<std::vector<int64_t>> numels;
  std::set<const void*> seen;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    numels.emplace_back();
    group_params_.emplace_back();
    if (groups[g].params().empty()) {
      throw ConfigError(fmt::format(
          "ZeroRedundancyOptimizer: parameter group {} is empty; leave it out", g));
    }
    for (const torch::Tensor& p : groups[g].params()) {
      const std::size_t i = params_.size();
      group_params_.back().push_back(i);
      if (!p.defined()) {
        throw ConfigError(fmt::format(
            "ZeroRedundancyOptimizer: parameter {} (group {}) is an undefined tensor", i, g));
      }
      if (!seen.insert(p.unsafeGetTensorImpl()).second) {
        throw ConfigError(fmt::format(
            "ZeroRedundancyOptimizer: parameter {} (group {}) is given twice; give each "
            "parameter once",
            i, g));
      }
      params_.push_back(p);
      numels.back().push_back(p.numel());
    }
  }
  if (params_.empty()) {
    throw ConfigError("ZeroRedundancyOptimizer: no parameters; give e.g. ddp.parameters()");
  }

  // Every rank must partition the same parameters.
  int64_t total = 0, weighted = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    total += params_[i].numel();
    weighted += static_cast<int64_t>(i + 1) * (params_[i].numel() + 7 * params_[i].dim());
  }
  const torch::Tensor mine =
      torch::tensor({static_cast<int64_t>(params_.size()), total, weighted}, torch::kInt64);
  const std::vector<torch::Tensor> all = dist::all_gather(mine);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].equal(mine)) {
      throw ConfigError(fmt::format(
          "ZeroRedundancyOptimizer: rank {} has {} parameters of {} elements, rank {} has {} of "
          "{}; construct it on every rank with the same parameters (e.g. ddp.parameters())",
          dist::rank(), params_.size(), total, r, all[r][0].item<int64_t>(), all[r][1].item<int64_t>()));
    }
  }

  owner_ = zero_partition(numels, dist::world_size());
  const int me = dist::rank();
  std::vector<torch::optim::OptimizerParamGroup> local_groups;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    std::vector<torch::Tensor> mine_in_group;
    for (const std::size_t i : group_params_[g]) {
      if (owner_[i] != me) continue;
      mine_in_group.push_back(params_[i]);
      local_params_.push_back(i);
    }
    if (mine_in_group.empty()) continue;
    local_group_of_.push_back(g);
    if (group.has_options()) {
      local_groups.emplace_back(std::move(mine_in_group), group.options().clone());
    } else {
      local_groups.emplace_back(std::move(mine_in_group));
    }
  }
  if (!local_groups.empty()) {
    local_ = make_optimizer(std::move(local_groups));
    if (!local_) throw ConfigError("ZeroRedundancyOptimizer: the factory returned no optimizer");
  }
}

void ZeroRedundancyOptimizer::step() {
  if (local_) local_->step();
  torch::NoGradGuard no_grad;
  for (int r = 0; r < dist::world_size(); ++r) {
    // One flat buffer per device and dtype of rank r's parameters, in order.
    std::map<std::pair<std::string, int>, std::vector<std::size_t>> buckets;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (owner_[i] != r) continue;
      buckets[{params_[i].device().str(), static_cast<int>(params_[i].scalar_type())}].push_back(i);
    }
    for (const auto& [key, indices] : buckets) {
      std::vector<torch::Tensor> flat;
      for (const std::size_t i : indices) flat.push_back(params_[i].detach().reshape({-1}));
      torch::Tensor buffer = torch::cat(flat);
      dist::broadcast(buffer, r);
      if (r == dist::rank()) continue;  // the owner's values are the ones sent
      int64_t offset = 0;
      for (const std::size_t i : indices) {
        const int64_t n = params_[i].numel();
        params_[i].detach().copy_(buffer.narrow(0, offset, n).view(params_[i].sizes()));
        offset += n;
      }
    }
  }
}

torch::Tensor ZeroRedundancyOptimizer::clip_grad_norm(double max_norm, double norm_type,
                                                      bool error_if_nonfinite) {
  constexpr std::string_view kOperation = "ZeroRedundancyOptimizer::clip_grad_norm";
  grad_norm::check_arguments(kOperation, max_norm, norm_type);
  const std::vector<torch::Tensor> grads = grad_norm::defined_grads(params_);
  std::vector<torch::Tensor> mine;
  for (const std::size_t i : owned_by(dist::rank())) mine.push_back(params_[i]);
  const torch::Tensor norms = grad_norm::per_grad_norms(
      grad_norm::defined_grads(mine), norm_type, grad_norm::total_options(grads, params_[0].device()));
  torch::Tensor part = grad_norm::part_of_total(norms, norm_type);
  dist::all_reduce(part, grad_norm::part_reduce_op(norm_type));
  return grad_norm::clip_by_total(grads, grad_norm::total_of_parts(part, norm_type), max_norm,
                                  norm_type, error_if_nonfinite, kOperation);
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  for (torch::Tensor& p : params_) {
    if (!p.mutable_grad().defined()) continue;
    if (set_to_none) {
      p.mutable_grad() = torch::Tensor();
    } else {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

torch::optim::Optimizer& ZeroRedundancyOptimizer::local_optimizer() {
  if (!local_) {
    throw ConfigError(fmt::format(
        "ZeroRedundancyOptimizer: rank {} owns no parameter ({} parameters over {} ranks), so it "
        "has no local optimizer; check has_local_optimizer() first",
        dist::rank(), params_.size(), dist::world_size()));
  }
  return *local_;
}

std::vector<std::size_t> ZeroRedundancyOptimizer::owned_by(int r) const {
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < owner_.size(); ++i) {
    if (owner_[i] == r) indices.push_back(i);
  }
  return indices;
}

namespace {
using Dict = c10::impl::GenericDict;
Dict string_dict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }
Dict index_dict() { return Dict(c10::IntType::get(), c10::AnyType::get()); }

const c10::IValue& entry(const Dict& d, const char* key, const std::string& what) {
  const auto it = d.find(key);
  if (it == d.end()) {
    throw CheckpointError(fmt::format("ZeroRedundancyOptimizer: {} has no '{}'", what, key));
  }
  return it->value();
}
}  // namespace

c10::impl::GenericDict ZeroRedundancyOptimizer::local_share() const {
  // This rank's share, indexed as the whole optimizer indexes: per-parameter
  // state by parameter index, group options by group index.
  Dict state = index_dict(), groups = index_dict();
  if (local_) {
    const Dict local = checkpoint::optimizer_state_dict(*local_).toGenericDict();
    for (const auto& e : local.at("state").toGenericDict()) {
      state.insert(static_cast<int64_t>(local_params_.at(static_cast<std::size_t>(e.key().toInt()))),
                   e.value());
    }
    const auto local_groups = local.at("param_groups").toListRef();
    for (std::size_t lg = 0; lg < local_groups.size(); ++lg) {
      Dict options = local_groups[lg].toGenericDict().copy();
      (void)options.erase("params");  // the whole optimizer numbers them
      groups.insert(static_cast<int64_t>(local_group_of_[lg]), options);
    }
  }
  Dict mine = string_dict();
  mine.insert("state", state);
  mine.insert("param_groups", groups);
  return mine;
}

c10::List<c10::IValue> ZeroRedundancyOptimizer::merged_param_groups(const c10::List<c10::IValue>& shares) const {
  std::vector<c10::optional<Dict>> merged(group_params_.size());
  for (const c10::IValue& share : shares) {
    for (const auto& e : share.toGenericDict().at("param_groups").toGenericDict()) {
      auto& g = merged.at(static_cast<std::size_t>(e.key().toInt()));
      if (!g) g = e.value().toGenericDict();  // the lowest rank's options (all ranks agree)
    }
  }
  c10::List<c10::IValue> out(c10::AnyType::get());
  for (std::size_t g = 0; g < group_params_.size(); ++g) {
    Dict options = merged[g]->copy();  // every group has an owner (none is empty)
    c10::List<int64_t> indices;
    for (const std::size_t i : group_params_[g]) indices.push_back(static_cast<int64_t>(i));
    options.insert("params", indices);
    out.push_back(options);
  }
  return out;
}

c10::IValue ZeroRedundancyOptimizer::state_dict() const {
  const c10::List<c10::IValue> all = dist::all_gather_ivalues(local_share());
  std::map<int64_t, c10::IValue> merged_state;
  for (const c10::IValue& share : all) {
    for (const auto& e : share.toGenericDict().at("state").toGenericDict()) {
      merged_state.emplace(e.key().toInt(), e.value());
    }
  }
  Dict out_state = index_dict();
  for (const auto& [index, value] : merged_state) out_state.insert(index, value);
  Dict result = string_dict();
  result.insert("state", out_state);
  result.insert("param_groups", merged_param_groups(all));
  return result;
}

void ZeroRedundancyOptimizer::load_state_dict(const c10::IValue& state_dict) {
  if (!state_dict.isGenericDict()) {
    throw CheckpointError(fmt::format(
        "ZeroRedundancyOptimizer::load_state_dict: expected a dict (an optimizer state_dict), got "
        "a {}",
        state_dict.tagKind()));
  }
  const Dict top = state_dict.toGenericDict();
  const c10::IValue& groups_value = entry(top, "param_groups", "the state_dict");
  const c10::IValue& state_value = entry(top, "state", "the state_dict");
  if (!groups_value.isList() || !state_value.isGenericDict()) {
    throw CheckpointError(
        "ZeroRedundancyOptimizer::load_state_dict: 'param_groups' must be a list and 'state' a "
        "dict, as optimizer_state_dict() writes them");
  }
  const auto saved_groups = groups_value.toListRef();
  if (saved_groups.size() != group_params_.size()) {
    throw CheckpointError(fmt::format(
        "ZeroRedundancyOptimizer::load_state_dict: the state_dict has {} parameter groups, this "
        "optimizer has {}; was it written for another model or another grouping?",
        saved_groups.size(), group_params_.size()));
  }
  // Saved parameter index of each of ours, group by group.
  std::vector<c10::IValue> saved_index(params_.size());
  for (std::size_t g = 0; g < saved_groups.size(); ++g) {
    const std::string what = fmt::format("param_groups[{}]", g);
    if (!saved_groups[g].isGenericDict()) {
      throw CheckpointError(fmt::format("ZeroRedundancyOptimizer: {} is not a dict", what));
    }
    const c10::IValue& params = entry(saved_groups[g].toGenericDict(), "params", what);
    const auto indices = params.isList() ? params.toListRef() : c10::ArrayRef<c10::IValue>();
    if (indices.size() != group_params_[g].size()) {
      throw CheckpointError(fmt::format(
          "ZeroRedundancyOptimizer::load_state_dict: {} has {} parameters, this optimizer's has "
          "{}; was it written for another model or another grouping?",
          what, indices.size(), group_params_[g].size()));
    }
    for (std::size_t k = 0; k < indices.size(); ++k) saved_index[group_params_[g][k]] = indices[k];
  }
  if (!local_) return;  // nothing of it is this rank's
  const Dict saved_state = state_value.toGenericDict();
  Dict local_state = index_dict();
  c10::List<c10::IValue> local_groups(c10::AnyType::get());
  // The local optimizer's state keeps the saved indices, so that its errors
  // name the parameter as the whole optimizer's state_dict does.
  std::string groups_here;  // "param_groups[0] here is param_groups[2] of the optimizer", ...
  for (std::size_t lg = 0; lg < local_group_of_.size(); ++lg) {
    const std::size_t g = local_group_of_[lg];
    Dict options = saved_groups[g].toGenericDict().copy();
    c10::List<int64_t> indices;
    for (const std::size_t i : group_params_[g]) {
      if (owner_[i] != dist::rank()) continue;
      const int64_t key = saved_index[i].isInt() ? saved_index[i].toInt() : static_cast<int64_t>(i);
      const auto it = saved_state.find(saved_index[i]);
      if (it != saved_state.end()) local_state.insert(key, it->value());
      indices.push_back(key);
    }
    options.insert_or_assign("params", indices);
    local_groups.push_back(options);
    if (lg != g) {
      groups_here += fmt::format("{}param_groups[{}] there is param_groups[{}] of the whole optimizer",
                                 groups_here.empty() ? "; " : ", ", lg, g);
    }
  }
  Dict local = string_dict();
  local.insert("state", local_state);
  local.insert("param_groups", local_groups);
  try {
    checkpoint::load_optimizer_state_dict(*local_, local);
  } catch (const CheckpointError& e) {
    throw CheckpointError(fmt::format(
        "ZeroRedundancyOptimizer::load_state_dict on rank {} (the owner of parameters {}): {}{}", dist::rank(),
        fmt::join(owned_by(dist::rank()), ", "), e.what(), groups_here));
  }
}

std::int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  if (!local_) return 0;
  std::int64_t bytes = 0;
  const c10::IValue sd = checkpoint::optimizer_state_dict(*local_);
  for (const auto& entry : sd.toGenericDict().at("state").toGenericDict()) {
    for (const auto& field : entry.value().toGenericDict()) {
      if (field.value().isTensor()) {
        const torch::Tensor& t = field.value().toTensor();
        bytes += t.numel() * static_cast<int64_t>(t.element_size());
      }
    }
  }
  return bytes;
}

}  // namespace rankwise::parallel
