#pragma once
// Private helpers shared by the metric sources.

#include <torch/types.h>

#include <sstream>
#include <string>

#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::metrics {

// "rankwise: rank 1/2: Accuracy::update" - the prefix of every error message.
inline std::string context(const std::string& metric, const std::string& operation) {
  std::string where;
  try {
    where = rankwise::core::where(core::here());
  } catch (const std::exception&) {
    where = "rank ?/?";
  }
  return core::message("{}: {}::{}", where, metric, operation);
}

inline std::string shape_of(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

inline std::string dtype_of(const torch::Tensor& t) {
  return std::string(c10::toString(t.scalar_type()));
}

[[noreturn]] inline void fail(const std::string& context, const std::string& what) {
  throw ConfigError(context + ": " + what);
}

}  // namespace rankwise::metrics
