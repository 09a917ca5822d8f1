// ZeroRedundancyOptimizer's state as entries of a sharded checkpoint: every
// rank saves its own partition's state (no gather) and a load at another
// world size reads the state of the parameters each rank owns now.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <utility>

#include "dist/all_gather_ivalues.h"

#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"

namespace rankwise::parallel {
namespace {

using Dict = c10::impl::GenericDict;

constexpr const char* kState = "state.";
constexpr const char* kGroups = "param_groups.";

// A key under the prefix: "state.<i>.<name>" or "param_groups.<g>.<option>".
struct ParsedKey {
  bool state = false;
  std::size_t index = 0;
  std::string name;
};

std::optional<ParsedKey> parse_key(const std::string& rest) {
  ParsedKey out;
  std::string tail;
  if (rest.rfind(kState, 0) == 0) {
    out.state = true;
    tail = rest.substr(std::char_traits<char>::length(kState));
  } else if (rest.rfind(kGroups, 0) == 0) {
    tail = rest.substr(std::char_traits<char>::length(kGroups));
  } else {
    return std::nullopt;
  }
  const auto dot = tail.find('.');
  if (dot == 0 || dot == std::string::npos || dot + 1 == tail.size() ||
      !std::all_of(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(dot),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    return std::nullopt;
  }
  out.index = std::stoul(tail.substr(0, dot));
  out.name = tail.substr(dot + 1);
  return out;
}

c10::IValue describe(const at::Tensor& t) {
  return c10::ivalue::Tuple::create({c10::IValue(t.sizes().vec()), c10::IValue(static_cast<int64_t>(t.scalar_type()))});
}

}  // namespace

checkpoint::ShardedState ZeroRedundancyOptimizer::sharded_state_dict(const std::string& prefix) const {
  // Every rank's state keys with their shapes and dtypes (not their data), and its groups' options.
  const Dict share = local_share();
  Dict described(c10::StringType::get(), c10::AnyType::get());
  std::map<std::string, at::Tensor> own;
  for (const auto& e : share.at("state").toGenericDict()) {
    for (const auto& field : e.value().toGenericDict()) {
      const std::string key = fmt::format("{}{}{}.{}", prefix, kState, e.key().toInt(), field.key().toStringRef());
      if (!field.value().isTensor()) {
        core::raise<CheckpointError>(
            "ZeroRedundancyOptimizer::sharded_state_dict: the state '{}' is a {}, not a tensor; "
            "save state_dict() instead",
            key, field.value().tagKind());
      }
      const at::Tensor& t = field.value().toTensor();
      own[key] = t.device().is_cpu() ? t : t.cpu();
      described.insert(key, describe(t));
    }
  }
  Dict mine(c10::StringType::get(), c10::AnyType::get());
  mine.insert("state", described);
  mine.insert("param_groups", share.at("param_groups"));
  const c10::List<c10::IValue> all = dist::all_gather_ivalues(mine);

  checkpoint::ShardedState out;
  for (const c10::IValue& other : all) {
    for (const auto& e : other.toGenericDict().at("state").toGenericDict()) {
      const std::string& key = e.key().toStringRef();
      if (out.count(key)) continue;
      const auto d = e.value().toTupleRef().elements();
      const auto shape = d[0].toIntVector();
      const auto dtype = static_cast<c10::ScalarType>(d[1].toInt());
      std::vector<checkpoint::TensorChunk> chunks;
      if (auto it = own.find(key); it != own.end()) chunks.push_back(checkpoint::TensorChunk{std::vector<int64_t>(shape.size(), 0), it->second});
      out.emplace(key, checkpoint::ShardedTensor(shape, dtype, std::move(chunks)));
    }
  }
  const c10::List<c10::IValue> groups = merged_param_groups(all);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const auto& option : groups.get(g).toGenericDict()) {
      out.emplace(fmt::format("{}{}{}.{}", prefix, kGroups, g, option.key().toStringRef()), checkpoint::ObjectEntry{option.value()});
    }
  }
  return out;
}

checkpoint::ShardedState ZeroRedundancyOptimizer::sharded_state_dict_to_load(
    const std::map<std::string, checkpoint::ShardedEntryMetadata>& stored, const std::string& prefix) const {
  const auto fail = [&](const std::string& why) {
    core::raise<CheckpointError>(
        "ZeroRedundancyOptimizer::sharded_state_dict_to_load(prefix '{}'): {}", prefix, why);
  };
  checkpoint::ShardedState out;
  const int me = dist::rank_or_zero();
  for (const auto& [key, entry] : stored) {
    if (key.rfind(prefix, 0) != 0) continue;
    const auto parsed = parse_key(key.substr(prefix.size()));
    if (!parsed) {
      fail("the checkpoint's key '" + key + "' is neither '" + prefix + "state.<parameter>.<name>' nor '" + prefix +
           "param_groups.<group>.<option>': was it saved with another prefix?");
    }
    if (parsed->state) {
      if (parsed->index >= params_.size()) {
        fail(fmt::format("the checkpoint holds state of parameter {}, this optimizer has {} parameters: was it written "
                         "for another model?", parsed->index, params_.size()));
      }
      if (!entry.is_tensor) fail("the state '" + key + "' is not a tensor in the checkpoint");
      std::vector<checkpoint::TensorChunk> chunks;
      if (owner_[parsed->index] == me) {
        chunks.push_back(checkpoint::TensorChunk{std::vector<int64_t>(entry.global_shape.size(), 0),
                                     at::zeros(entry.global_shape, at::TensorOptions().dtype(entry.dtype))});
      }
      out.emplace(key, checkpoint::ShardedTensor(entry.global_shape, entry.dtype, std::move(chunks)));
    } else {
      if (parsed->index >= group_params_.size()) {
        fail(fmt::format("the checkpoint holds options of parameter group {}, this optimizer has {} group(s)",
                         parsed->index, group_params_.size()));
      }
      if (entry.is_tensor) fail("the option '" + key + "' is a tensor in the checkpoint, not an object");
      out.emplace(key, checkpoint::ObjectEntry{});
    }
  }
  if (out.empty()) fail("the checkpoint has no key that starts with the prefix");
  return out;
}

void ZeroRedundancyOptimizer::load_sharded_state_dict(const checkpoint::ShardedState& loaded, const std::string& prefix) {
  Dict state(c10::IntType::get(), c10::AnyType::get());
  std::map<std::size_t, Dict> groups;
  for (const auto& [key, entry] : loaded) {
    if (key.rfind(prefix, 0) != 0) continue;
    const auto parsed = parse_key(key.substr(prefix.size()));
    if (!parsed) continue;
    if (parsed->state) {
      const auto* sharded = std::get_if<checkpoint::ShardedTensor>(&entry);
      if (sharded == nullptr || sharded->chunks().empty()) continue;  // not this rank's parameter
      const auto index = static_cast<int64_t>(parsed->index);
      if (!state.contains(index)) state.insert(index, Dict(c10::StringType::get(), c10::AnyType::get()));
      state.at(index).toGenericDict().insert(parsed->name, sharded->chunks().front().data);
    } else if (const auto* object = std::get_if<checkpoint::ObjectEntry>(&entry)) {
      if (object->value.isNone() && parsed->name == "params") {
        core::raise<CheckpointError>(
            "ZeroRedundancyOptimizer::load_sharded_state_dict(prefix '{}'): '{}' holds None: the "
            "entries were not filled. Call load_sharded(dir, state) with them first",
            prefix, key);
      }
      auto it = groups.find(parsed->index);
      if (it == groups.end()) it = groups.emplace(parsed->index, Dict(c10::StringType::get(), c10::AnyType::get())).first;
      it->second.insert(parsed->name, object->value);
    }
  }
  c10::List<c10::IValue> param_groups(c10::AnyType::get());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (!groups.count(g)) {
      core::raise<CheckpointError>(
          "ZeroRedundancyOptimizer::load_sharded_state_dict(prefix '{}'): the options of parameter "
          "group {} are missing (groups up to {} are there)",
          prefix, g, groups.rbegin()->first);
    }
    param_groups.push_back(groups.at(g));
  }
  Dict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("state", state);
  top.insert("param_groups", param_groups);
  load_state_dict(top);
}

}  // namespace rankwise::parallel
