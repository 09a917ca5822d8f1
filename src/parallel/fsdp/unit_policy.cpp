#include "parallel/fsdp/unit_policy.h"

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/check.h"
#include "rankwise/log.h"
#include "rankwise/error.h"

namespace rankwise::parallel::fsdp {
namespace {

using torch::nn::Module;

bool is_container(const Module& m) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&m) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&m) != nullptr;
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// The default: each child of every outermost Sequential or ModuleList (the
// root itself when it is one).
void default_units(const Module& m, const std::string& prefix, bool parent_is_container,
                   std::vector<std::string>& out) {
  for (const auto& child : m.named_children()) {
    const std::string name = join(prefix, child.key());
    if (parent_is_container) {
      out.push_back(name);
      continue;
    }
    default_units(*child.value(), name, is_container(*child.value()), out);
  }
}

int64_t own_numel(const Module& m) {
  int64_t n = 0;
  for (const auto& p : m.named_parameters(/*recurse=*/false)) n += p.value().numel();
  return n;
}

// Post-order: a submodule is a unit when the elements of its subtree not yet
// in a unit reach `min` (PyTorch's size_based_auto_wrap_policy).
int64_t size_units(const Module& m, const std::string& prefix, int64_t min, bool is_root,
                   std::vector<std::string>& out) {
  int64_t unwrapped = own_numel(m);
  for (const auto& child : m.named_children()) {
    unwrapped += size_units(*child.value(), join(prefix, child.key()), min, false, out);
  }
  if (!is_root && unwrapped >= min) {
    out.push_back(prefix);
    return 0;
  }
  return unwrapped;
}

void matching_units(const Module& m, const std::string& prefix, const UnitPolicy& policy,
                    std::vector<std::string>& out) {
  for (const auto& child : m.named_children()) {
    const std::string name = join(prefix, child.key());
    const bool named = std::find(policy.names().begin(), policy.names().end(), name) !=
                       policy.names().end();
    const bool typed = std::any_of(policy.types().begin(), policy.types().end(),
                                   [&](const auto& p) { return p(name, *child.value()); });
    if (named || typed) {
      out.push_back(name);
      continue;  // an outer unit holds what is inside it
    }
    matching_units(*child.value(), name, policy, out);
  }
}

std::vector<std::string> unit_names(const Module& root, const UnitPolicy& policy) {
  std::vector<std::string> names;
  if (policy.is_default()) {
    default_units(root, "", is_container(root), names);
    if (names.empty() && root.children().size() > 1) {
      print0("note: FullyShardedDataParallel: the default unit policy found no Sequential or "
             "ModuleList in the model, so the whole model is one unit, gathered whole at every "
             "forward; name its blocks to shard that memory (UnitPolicy().names({{...}}) or "
             "of_type<BlockImpl>(), docs/fsdp.md)");
    }
    return names;
  }
  matching_units(root, "", policy, names);
  if (policy.min_params() > 0) {
    std::vector<std::string> sized;
    size_units(root, "", policy.min_params(), true, sized);
    for (const auto& n : sized) {
      const bool inside = std::any_of(names.begin(), names.end(), [&](const std::string& u) {
        return n == u || n.rfind(u + ".", 0) == 0 || u.rfind(n + ".", 0) == 0;
      });
      if (!inside) names.push_back(n);
    }
  }
  for (const auto& wanted : policy.names()) {
    RANKWISE_CHECK(std::find(names.begin(), names.end(), wanted) != names.end(), ConfigError,
                   "FullyShardedDataParallel: UnitPolicy::names() holds '{}', which is not a "
                   "submodule of the model (or lies inside another unit); use the names "
                   "named_modules() gives, e.g. \"blocks.0\"",
                   wanted);
  }
  RANKWISE_CHECK(!names.empty(), ConfigError,
                 "FullyShardedDataParallel: the UnitPolicy matches no submodule of the model, so "
                 "the whole model would be one unit gathered at once; check the types, names or "
                 "min_params ({}) it was given, or pass UnitPolicy() for the default (each child "
                 "of a Sequential or ModuleList)",
                 policy.min_params());
  return names;
}

}  // namespace

std::vector<UnitSpec> find_units(const Module& root, const UnitPolicy& policy) {
  const std::vector<std::string> names = unit_names(root, policy);
  // Which units each parameter tensor appears in (tied weights appear twice).
  std::map<const void*, std::set<std::size_t>> owners;
  std::map<const void*, std::string> first_name;
  std::vector<const void*> order;
  const auto all = root.named_parameters(/*recurse=*/true);
  for (const auto& p : all) {
    const void* key = p.value().unsafeGetTensorImpl();
    if (!first_name.count(key)) {
      first_name[key] = p.key();
      order.push_back(key);
    }
    bool in_unit = false;
    for (std::size_t u = 0; u < names.size(); ++u) {
      if (p.key().rfind(names[u] + ".", 0) == 0) {
        owners[key].insert(u);
        in_unit = true;
      }
    }
    if (!in_unit) owners[key].insert(names.size());  // the root's own
  }
  std::vector<UnitSpec> units(names.size() + 1);
  for (std::size_t u = 0; u < names.size(); ++u) units[u].name = names[u];
  for (const void* key : order) {
    const auto& in = owners[key];
    std::vector<std::string>& target =
        in.size() == 1 ? units[*in.begin()].parameters : units.back().parameters;  // tied: root
    target.push_back(first_name[key]);
  }
  // A unit without parameters has nothing to gather.
  units.erase(std::remove_if(units.begin(), units.end() - 1,
                             [](const UnitSpec& u) { return u.parameters.empty(); }),
              units.end() - 1);
  return units;
}

}  // namespace rankwise::parallel::fsdp
