#include "rankwise/checkpoint/state_dict.h"

#include "core/check.h"

#include <fmt/ranges.h>

#include <torch/serialize.h>
#include <torch/torch.h>

#include "util/text.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint {
namespace {

std::string shape(const torch::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

std::string strip_wrapper(const std::string& key) {
  const std::string prefix = "module.";
  return key.rfind(prefix, 0) == 0 ? key.substr(prefix.size()) : key;
}

}  // namespace

StateDict state_dict(const torch::nn::Module& module) {
  StateDict result;
  for (const auto& item : module.named_parameters(true)) result.insert(item.key(), item.value().detach());
  for (const auto& item : module.named_buffers(true)) result.insert(item.key(), item.value().detach());
  return result;
}

StateDict to_state_dict(const c10::IValue& value) {
  if (!value.isGenericDict()) {
    core::raise<CheckpointError>("expected a state_dict (dict of tensors), got {}",
                                 value.tagKind());
  }
  StateDict result;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      core::raise<CheckpointError>("a state_dict must map strings to tensors");
    }
    result.insert(entry.key().toStringRef(), entry.value().toTensor());
  }
  return result;
}

void load_state_dict(torch::nn::Module& module, const StateDict& state, bool strict) {
  std::map<std::string, torch::Tensor> incoming;
  for (const auto& entry : state) incoming[strip_wrapper(entry.key())] = entry.value();
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& item : module.named_parameters(true)) targets.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers(true)) targets.emplace_back(item.key(), item.value());

  std::vector<std::string> missing;
  std::set<std::string> known;
  for (const auto& target : targets) {
    known.insert(target.first);
    auto it = incoming.find(target.first);
    if (it == incoming.end()) {
      missing.push_back(target.first);
      continue;
    }
    if (it->second.sizes() != target.second.sizes()) {
      core::raise<CheckpointError>(
          "load_state_dict: shape mismatch for '{}': checkpoint has {}, the model has {}. Was the "
          "checkpoint written by another model?",
          target.first, shape(it->second), shape(target.second));
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& entry : incoming) {
    if (!known.count(entry.first)) unexpected.push_back(entry.first);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    auto list = [](const std::vector<std::string>& v) {
      return v.empty() ? std::string("none") : util::join_strings(v);
    };
    core::raise<CheckpointError>(
        "load_state_dict (strict): missing keys [{}], unexpected keys [{}]. Was the checkpoint "
        "written by another model? Pass strict=false to load the matching keys only",
        list(missing), list(unexpected));
  }
  torch::NoGradGuard no_grad;
  for (auto& target : targets) {
    auto it = incoming.find(target.first);
    if (it != incoming.end()) target.second.copy_(it->second);
  }
}

}  // namespace rankwise::checkpoint
