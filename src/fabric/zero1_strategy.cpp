#include "fabric/zero1_strategy.h"

#include <c10/util/Type.h>
#include <fmt/format.h>
#include <torch/optim.h>

#include <optional>
#include <typeinfo>

#include "core/check.h"
#include "rankwise/amp/grad_scaler.h"
#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/error.h"

namespace rankwise::fabric {
namespace {

// The factory when `optimizer` is an OptimizerType.
template <typename OptimizerType, typename Options>
std::optional<parallel::ZeroRedundancyOptimizer::Factory> factory_if(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const OptimizerType*>(&optimizer) == nullptr) return std::nullopt;
  const Options defaults = static_cast<const Options&>(optimizer.defaults());
  return [defaults](std::vector<torch::optim::OptimizerParamGroup> groups) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<OptimizerType>(std::move(groups), defaults);
  };
}

// The user's groups, each with a copy of its options.
std::vector<torch::optim::OptimizerParamGroup> copied_groups(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& group : optimizer.param_groups()) {
    groups.emplace_back(group.params(), group.options().clone());
  }
  return groups;
}

// The index of the user's group that holds `parameter`.
std::size_t group_holding(const torch::optim::Optimizer& optimizer, const torch::Tensor& parameter) {
  const auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      if (p.unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return g;
    }
  }
  core::raise<Error>(core::here(), "strategy zero1: a parameter of ZeRO's share is in none of the optimizer's groups");
}

}  // namespace

parallel::ZeroRedundancyOptimizer::Factory same_optimizer_factory(const torch::optim::Optimizer& optimizer) {
  using namespace torch::optim;
  for (const auto& factory : {factory_if<SGD, SGDOptions>(optimizer), factory_if<Adam, AdamOptions>(optimizer),
                              factory_if<AdamW, AdamWOptions>(optimizer), factory_if<RMSprop, RMSpropOptions>(optimizer),
                              factory_if<Adagrad, AdagradOptions>(optimizer)}) {
    if (factory) return *factory;
  }
  core::raise<ConfigError>(
      core::here(),
      "strategy zero1: the optimizer is a {}; ZeRO rebuilds the optimizer over each rank's share of "
      "the parameters and knows SGD, Adam, AdamW, RMSprop and Adagrad: use one of them, or strategy "
      "ddp",
      c10::demangle(typeid(optimizer).name()));
}

void restore_learning_rates(torch::optim::Optimizer& optimizer, const checkpoint::ShardedState& loaded,
                            const std::string& prefix) {
  auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto it = loaded.find(fmt::format("{}param_groups.{}.lr", prefix, g));
    if (it == loaded.end()) continue;
    const auto* lr = std::get_if<checkpoint::ObjectEntry>(&it->second);
    if (lr != nullptr && lr->value.isDouble()) groups[g].options().set_lr(lr->value.toDouble());
  }
}

void Zero1Strategy::set_optimizer(torch::optim::Optimizer& optimizer) {
  auto factory = same_optimizer_factory(optimizer);  // before the collective
  DdpStrategy::set_optimizer(optimizer);
  user_group_of_.clear();
  zero_ = std::make_unique<parallel::ZeroRedundancyOptimizer>(
      copied_groups(optimizer), [&](std::vector<torch::optim::OptimizerParamGroup> local) {
        for (const auto& group : local) user_group_of_.push_back(group_holding(optimizer, group.params().at(0)));
        return factory(std::move(local));
      });
}

void Zero1Strategy::copy_options() const {
  if (!zero_->has_local_optimizer()) return;
  auto& local = zero_->local_optimizer().param_groups();
  const auto& user = optimizer().param_groups();
  for (std::size_t i = 0; i < local.size(); ++i) local[i].set_options(user[user_group_of_[i]].options().clone());
}

torch::Tensor Zero1Strategy::clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                                            amp::GradScaler* scaler) {
  if (!zero_) return DdpStrategy::clip_gradients(max_norm, norm_type, error_if_nonfinite, scaler);
  if (scaler) scaler->unscale_(*zero_);
  return zero_->clip_grad_norm(max_norm, norm_type, error_if_nonfinite);
}

bool Zero1Strategy::step(amp::GradScaler* scaler) {
  copy_options();
  bool stepped = true;
  if (scaler) {
    stepped = scaler->step(*zero_);  // collective: every rank skips alike
  } else {
    zero_->step();
  }
  zero_->zero_grad();
  return stepped;
}

checkpoint::ShardedState Zero1Strategy::sharded_state_dict() const {
  checkpoint::ShardedState state;
  // The model is the same on every rank: replicated entries, rank 0 writes them.
  for (const auto& item : checkpoint::state_dict(module())) {
    state.emplace(kModelPrefix + item.key(), item.value().cpu());
  }
  if (!zero_) return state;
  copy_options();
  state.merge(zero_->sharded_state_dict(kOptimizerPrefix));
  return state;
}

checkpoint::ShardedState Zero1Strategy::sharded_state_dict_to_load(const StoredKeys& stored) const {
  checkpoint::ShardedState state;
  for (const auto& item : checkpoint::state_dict(module())) {
    state.emplace(kModelPrefix + item.key(), torch::zeros_like(item.value(), item.value().options().device(torch::kCPU)));
  }
  if (zero_) state.merge(zero_->sharded_state_dict_to_load(stored, kOptimizerPrefix));
  return state;
}

void Zero1Strategy::load_sharded_state_dict(const checkpoint::ShardedState& loaded) {
  checkpoint::StateDict model;
  const std::string prefix = kModelPrefix;
  for (const auto& [key, entry] : loaded) {
    if (key.rfind(prefix, 0) == 0) model.insert(key.substr(prefix.size()), std::get<at::Tensor>(entry));
  }
  checkpoint::load_state_dict(module(), model);
  if (!zero_) return;
  zero_->load_sharded_state_dict(loaded, kOptimizerPrefix);
  // The user's optimizer takes the checkpoint's options, as under ddp: whole
  // for the groups this rank has a share of (the ones it steps), the
  // learning rate for the others.
  restore_learning_rates(optimizer(), loaded, kOptimizerPrefix);
  if (!zero_->has_local_optimizer()) return;
  auto& user = optimizer().param_groups();
  const auto& local = zero_->local_optimizer().param_groups();
  for (std::size_t i = 0; i < local.size(); ++i) user[user_group_of_[i]].set_options(local[i].options().clone());
}

}  // namespace rankwise::fabric
