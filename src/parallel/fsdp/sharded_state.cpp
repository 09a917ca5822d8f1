// A sharded model's state: its parameters' rows and its optimizer's state as
// entries of a sharded checkpoint (DCP's layout, no communication for the
// model), the gathered full state, clipping over all shards, and the checks
// of what the user hands it (docs/fsdp.md, "Checkpoints").
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "core/check.h"
#include "dist/all_gather_ivalues.h"
#include "parallel/fsdp/engine_impl.h"
#include "parallel/grad_norm.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/error.h"

namespace rankwise::parallel {
namespace {

using checkpoint::ShardedState;
using checkpoint::ShardedTensor;
using checkpoint::TensorChunk;
using Dict = c10::impl::GenericDict;
using fsdp::ParamShard;

std::vector<int64_t> row_offsets(const ParamShard& p, int rank) {
  std::vector<int64_t> offsets(p.shape.size(), 0);
  offsets[0] = std::min(p.chunk * rank, p.rows);
  return offsets;
}

// This rank's rows of a tensor of p's full shape: `data` (or none when it holds no row).
ShardedTensor rows_entry(const ParamShard& p, int rank, c10::ScalarType dtype, const at::Tensor& data) {
  std::vector<TensorChunk> chunks;
  if (p.rows_of(rank) > 0) chunks.push_back(TensorChunk{row_offsets(p, rank), data});
  return ShardedTensor(p.shape, dtype, std::move(chunks));
}

at::Tensor on_cpu(const at::Tensor& t) { return t.device().is_cpu() ? t.detach() : t.detach().cpu(); }

// "state.<i>.<name>" under the prefix, as ZeroRedundancyOptimizer's keys.
struct StateKey {
  std::size_t index = 0;
  std::string name;
};

std::optional<StateKey> parse_state_key(const std::string& rest) {
  constexpr std::string_view kState = "state.";
  if (rest.rfind(kState, 0) != 0) return std::nullopt;
  const std::string tail = rest.substr(kState.size());
  const auto dot = tail.find('.');
  if (dot == 0 || dot == std::string::npos ||
      !std::all_of(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(dot),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    return std::nullopt;
  }
  return StateKey{std::stoul(tail.substr(0, dot)), tail.substr(dot + 1)};
}

std::optional<std::pair<std::size_t, std::string>> parse_group_key(const std::string& rest) {
  constexpr std::string_view kGroups = "param_groups.";
  if (rest.rfind(kGroups, 0) != 0) return std::nullopt;
  const std::string tail = rest.substr(kGroups.size());
  const auto dot = tail.find('.');
  if (dot == 0 || dot == std::string::npos) return std::nullopt;
  return std::make_pair(std::stoul(tail.substr(0, dot)), tail.substr(dot + 1));
}

bool is_rows_of(const at::Tensor& t, const ParamShard& p) {
  return t.dim() == static_cast<int64_t>(p.shape.size()) && t.dim() > 0 &&
         std::equal(p.shape.begin() + 1, p.shape.end(), t.sizes().begin() + 1) &&
         t.size(0) == p.shard.size(0);
}

}  // namespace

namespace fsdp {

checkpoint::ShardedState ShardingEngine::sharded_state_dict(const std::string& prefix) const {
  ShardedState out;
  for (const auto& p : impl_->params) {
    out.emplace(prefix + p->name,
                rows_entry(*p, impl_->rank, p->shard.scalar_type(), on_cpu(p->shard)));
  }
  for (const auto& b : impl_->module->named_buffers(/*recurse=*/true)) {
    out.emplace(prefix + b.key(), on_cpu(b.value()));
  }
  return out;
}

checkpoint::ShardedState ShardingEngine::sharded_state_dict_to_load(const std::string& prefix) const {
  ShardedState out;
  for (const auto& p : impl_->params) {
    out.emplace(prefix + p->name, rows_entry(*p, impl_->rank, p->shard.scalar_type(),
                                             at::empty(p->shard.sizes(), p->shard.options().device(at::kCPU))));
  }
  for (const auto& b : impl_->module->named_buffers(/*recurse=*/true)) {
    out.emplace(prefix + b.key(), at::empty(b.value().sizes(), b.value().options().device(at::kCPU)));
  }
  return out;
}

void ShardingEngine::load_sharded_state_dict(const checkpoint::ShardedState& loaded,
                                             const std::string& prefix) {
  at::NoGradGuard no_grad;
  const auto find = [&](const std::string& name) -> const checkpoint::ShardedEntry& {
    const auto it = loaded.find(prefix + name);
    RANKWISE_CHECK(it != loaded.end(), CheckpointError, core::at(impl_->group),
                   "FullyShardedDataParallel::load_sharded_state_dict: no entry '{}{}'; load the "
                   "entries of sharded_state_dict_to_load(\"{}\") first",
                   prefix, name, prefix);
    return it->second;
  };
  for (auto& p : impl_->params) {
    const auto* rows = std::get_if<ShardedTensor>(&find(p->name));
    RANKWISE_CHECK(rows != nullptr, CheckpointError, core::at(impl_->group),
                   "FullyShardedDataParallel::load_sharded_state_dict: '{}{}' is not a sharded "
                   "tensor; load the entries of sharded_state_dict_to_load()",
                   prefix, p->name);
    if (!rows->chunks().empty()) p->shard.copy_(rows->chunks().front().data);
  }
  for (auto& b : impl_->module->named_buffers(/*recurse=*/true)) {
    const auto* plain = std::get_if<at::Tensor>(&find(b.key()));
    RANKWISE_CHECK(plain != nullptr, CheckpointError, core::at(impl_->group),
                   "FullyShardedDataParallel::load_sharded_state_dict: buffer '{}{}' is not a "
                   "plain tensor in what was loaded",
                   prefix, b.key());
    b.value().copy_(*plain);
  }
}

std::map<std::string, torch::Tensor> ShardingEngine::full_state_dict() const {
  std::map<std::string, torch::Tensor> out;
  std::lock_guard lock(impl_->mutex);
  Unobserved quiet;
  at::NoGradGuard no_grad;
  for (std::size_t u = 0; u < impl_->units.size(); ++u) {
    Unit& unit = impl_->units[u];
    // The masters, not the gathered compute copies (which may be bfloat16).
    for (const ParamShard* p : unit.params) {
      at::Tensor padded = at::zeros({p->padded_numel()}, p->shard.options().requires_grad(false));
      if (p->shard.numel() > 0) padded.narrow(0, 0, p->shard.numel()).copy_(p->shard.detach().reshape({-1}));
      const auto pieces = impl_->group.all_gather(padded);
      std::vector<at::Tensor> rows;
      for (int r = 0; r < impl_->world; ++r) {
        const int64_t n = p->rows_of(r) * p->row_numel;
        if (n > 0) rows.push_back(pieces[static_cast<std::size_t>(r)].narrow(0, 0, n));
      }
      out.emplace(p->name, at::cat(rows).view(p->shape).cpu());
    }
  }
  for (const auto& b : impl_->module->named_buffers(/*recurse=*/true)) {
    out.emplace(b.key(), b.value().detach().cpu().clone());
  }
  return out;
}

torch::Tensor ShardingEngine::clip_grad_norm(double max_norm, double norm_type,
                                             bool error_if_nonfinite) {
  constexpr std::string_view kOperation = "FullyShardedDataParallel::clip_grad_norm";
  grad_norm::check_arguments(kOperation, max_norm, norm_type);
  std::lock_guard lock(impl_->mutex);
  Unobserved quiet;
  const std::vector<torch::Tensor> grads = grad_norm::defined_grads(parameters());
  const torch::Tensor norms = grad_norm::per_grad_norms(
      grads, norm_type, grad_norm::total_options(grads, impl_->params.front()->shard.device()));
  torch::Tensor part = grad_norm::part_of_total(norms, norm_type);
  impl_->group.all_reduce(part, grad_norm::part_reduce_op(norm_type));
  return grad_norm::clip_by_total(grads, grad_norm::total_of_parts(part, norm_type), max_norm,
                                  norm_type, error_if_nonfinite, kOperation);
}

void ShardingEngine::check_optimizer(const torch::optim::Optimizer& optimizer) const {
  std::vector<const c10::TensorImpl*> held;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& t : group.params()) held.push_back(t.unsafeGetTensorImpl());
  }
  std::vector<const c10::TensorImpl*> shards;
  for (const auto& p : impl_->params) shards.push_back(p->shard.unsafeGetTensorImpl());
  if (held == shards) return;
  std::size_t unsharded = 0;
  for (const auto& p : impl_->params) {
    unsharded += std::count(held.begin(), held.end(), p->param.unsafeGetTensorImpl());
  }
  core::raise<ConfigError>(
      core::at(impl_->group),
      "FullyShardedDataParallel: the optimizer holds {} tensor(s){}, not this rank's {} shards in "
      "parameters()' order. Build the optimizer after wrapping, over fsdp.parameters() (under a "
      "Fabric: model = fabric.setup_module(...), then the optimizer over model.parameters(), then "
      "fabric.setup_optimizers(optimizer))",
      held.size(),
      unsharded > 0 ? fmt::format(", {} of them the model's unsharded parameters", unsharded) : "",
      shards.size());
}

}  // namespace fsdp

checkpoint::ShardedState fsdp_optimizer_state_dict(const fsdp::ShardingEngine& engine,
                                                   const torch::optim::Optimizer& optimizer,
                                                   const std::string& prefix) {
  engine.check_optimizer(optimizer);
  const auto layouts = engine.layouts();
  const int rank = engine.rank();
  const Dict full = checkpoint::optimizer_state_dict(optimizer).toGenericDict();
  // Which keys every rank has (a rank without rows still declares them).
  Dict described(c10::StringType::get(), c10::AnyType::get());
  std::map<std::string, at::Tensor> own;
  for (const auto& e : full.at("state").toGenericDict()) {
    const auto i = static_cast<std::size_t>(e.key().toInt());
    for (const auto& field : e.value().toGenericDict()) {
      const std::string key = fmt::format("{}state.{}.{}", prefix, i, field.key().toStringRef());
      RANKWISE_CHECK(field.value().isTensor(), CheckpointError,
                     "fsdp_optimizer_state_dict: the state '{}' is a {}, not a tensor", key,
                     field.value().tagKind());
      const at::Tensor t = on_cpu(field.value().toTensor());
      own[key] = t;
      const bool rows = is_rows_of(t, *layouts[i]);
      described.insert(key, c10::ivalue::Tuple::create(
                                {c10::IValue(rows), c10::IValue(static_cast<int64_t>(t.scalar_type())),
                                 c10::IValue(rows ? layouts[i]->shape : t.sizes().vec())}));
    }
  }
  const c10::List<c10::IValue> all = dist::all_gather_ivalues(described);
  ShardedState out;
  for (const c10::IValue& other : all) {
    for (const auto& e : other.toGenericDict()) {
      const std::string& key = e.key().toStringRef();
      if (out.count(key)) continue;
      const auto d = e.value().toTupleRef().elements();
      const auto dtype = static_cast<c10::ScalarType>(d[1].toInt());
      const auto parsed = parse_state_key(key.substr(prefix.size()));
      const auto it = own.find(key);
      if (d[0].toBool()) {
        const ParamShard& p = *layouts[parsed->index];
        out.emplace(key, rows_entry(p, rank, dtype, it != own.end() ? it->second : at::Tensor()));
      } else {
        // Replicated state (a step count): the value of any rank that has it.
        const auto shape = d[2].toIntVector();
        std::vector<TensorChunk> chunks;
        if (it != own.end() && rank == 0) chunks.push_back(TensorChunk{std::vector<int64_t>(shape.size(), 0), it->second});
        out.emplace(key, ShardedTensor(shape, dtype, std::move(chunks)));
      }
    }
  }
  const auto groups = full.at("param_groups").toList();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const auto& option : groups.get(g).toGenericDict()) {
      out.emplace(fmt::format("{}param_groups.{}.{}", prefix, g, option.key().toStringRef()),
                  checkpoint::ObjectEntry{option.value()});
    }
  }
  return out;
}

checkpoint::ShardedState fsdp_optimizer_state_dict_to_load(
    const fsdp::ShardingEngine& engine,
    const std::map<std::string, checkpoint::ShardedEntryMetadata>& stored, const std::string& prefix) {
  const auto layouts = engine.layouts();
  const int rank = engine.rank();
  ShardedState out;
  for (const auto& [key, entry] : stored) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string rest = key.substr(prefix.size());
    if (const auto state = parse_state_key(rest)) {
      RANKWISE_CHECK(state->index < layouts.size(), CheckpointError,
                     "fsdp_optimizer_state_dict_to_load: the checkpoint holds state of parameter "
                     "{}, the model has {} parameters: was it written for another model?",
                     state->index, layouts.size());
      RANKWISE_CHECK(entry.is_tensor, CheckpointError,
                     "fsdp_optimizer_state_dict_to_load: '{}' is not a tensor in the checkpoint", key);
      const ParamShard& p = *layouts[state->index];
      if (entry.global_shape == p.shape) {
        out.emplace(key, rows_entry(p, rank, entry.dtype,
                                    at::empty(p.shard.sizes(), at::TensorOptions().dtype(entry.dtype))));
      } else {
        out.emplace(key, at::empty(entry.global_shape, at::TensorOptions().dtype(entry.dtype)));
      }
    } else if (parse_group_key(rest)) {
      out.emplace(key, checkpoint::ObjectEntry{});
    }
  }
  RANKWISE_CHECK(!out.empty(), CheckpointError,
                 "fsdp_optimizer_state_dict_to_load: the checkpoint has no key that starts with "
                 "'{}'; was the optimizer saved under another prefix?",
                 prefix);
  return out;
}

void load_fsdp_optimizer_state_dict(const fsdp::ShardingEngine& engine,
                                    torch::optim::Optimizer& optimizer,
                                    const checkpoint::ShardedState& loaded, const std::string& prefix) {
  engine.check_optimizer(optimizer);
  const auto layouts = engine.layouts();
  Dict state(c10::IntType::get(), c10::AnyType::get());
  std::map<std::size_t, Dict> groups;
  for (const auto& [key, entry] : loaded) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string rest = key.substr(prefix.size());
    if (const auto parsed = parse_state_key(rest)) {
      at::Tensor value;
      if (const auto* rows = std::get_if<ShardedTensor>(&entry)) {
        value = rows->chunks().empty()
                    ? at::empty(layouts[parsed->index]->shard.sizes(), at::TensorOptions().dtype(rows->dtype()))
                    : rows->chunks().front().data;
      } else if (const auto* plain = std::get_if<at::Tensor>(&entry)) {
        value = *plain;
      } else {
        continue;
      }
      const auto index = static_cast<int64_t>(parsed->index);
      if (!state.contains(index)) state.insert(index, Dict(c10::StringType::get(), c10::AnyType::get()));
      state.at(index).toGenericDict().insert(parsed->name, value);
    } else if (const auto group = parse_group_key(rest)) {
      const auto* object = std::get_if<checkpoint::ObjectEntry>(&entry);
      if (object == nullptr) continue;
      auto it = groups.find(group->first);
      if (it == groups.end()) it = groups.emplace(group->first, Dict(c10::StringType::get(), c10::AnyType::get())).first;
      it->second.insert(group->second, object->value);
    }
  }
  c10::List<c10::IValue> param_groups(c10::AnyType::get());
  for (auto& [g, options] : groups) param_groups.push_back(options);
  Dict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("state", state);
  top.insert("param_groups", param_groups);
  checkpoint::load_optimizer_state_dict(optimizer, top);
}

}  // namespace rankwise::parallel
