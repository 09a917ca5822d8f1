#include "checkpoint/pickle/saveable_value.h"

#include "core/check.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "rankwise/error.h"

namespace rankwise::checkpoint::pickle {

namespace {

std::string key_text(const c10::IValue& key) {
  if (key.isString()) return fmt::format("'{}'", key.toStringRef());
  if (key.isInt()) return fmt::format("{}", key.toInt());
  return fmt::format("<{} key>", key.tagKind());
}

}  // namespace

void check_saveable(const c10::IValue& root) {
  // (value, where it sits); the root itself has no path.
  std::vector<std::pair<c10::IValue, std::string>> pending = {{root, ""}};
  std::unordered_set<const void*> seen;
  while (!pending.empty()) {
    auto [value, where] = std::move(pending.back());
    pending.pop_back();
    if (value.isPtrType() && !seen.insert(value.internalToPointer()).second) continue;
    if (value.isTensor() && !value.toTensor().defined()) {
      core::raise<CheckpointError>(
          "cannot save the checkpoint: the tensor at {} is undefined (a default-constructed "
          "at::Tensor, e.g. a gradient never computed); give it a value or leave it out",
          (where.empty() ? std::string("its root") : where));
    }
    const std::string prefix = where.empty() ? "" : where + " -> ";
    if (value.isGenericDict()) {
      for (const auto& entry : value.toGenericDict()) {
        pending.emplace_back(entry.value(), prefix + key_text(entry.key()));
      }
    } else if (value.isList()) {
      const auto items = value.toListRef();
      for (std::size_t i = 0; i < items.size(); ++i) pending.emplace_back(items[i], fmt::format("{}[{}]", where, i));
    } else if (value.isTuple()) {
      const auto& items = value.toTupleRef().elements();
      for (std::size_t i = 0; i < items.size(); ++i) pending.emplace_back(items[i], fmt::format("{}[{}]", where, i));
    }
  }
}

}  // namespace rankwise::checkpoint::pickle
