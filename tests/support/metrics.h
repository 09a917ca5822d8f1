#pragma once
// Small helpers of the metrics unit tests: tensors from literals, a scalar
// tensor's value, and a ConfigError's message.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "rankwise/error.h"

namespace rankwise::test {

inline torch::Tensor longs(std::vector<int64_t> v) { return torch::tensor(v, torch::kLong); }

inline torch::Tensor doubles(std::vector<double> v) { return torch::tensor(v, torch::kDouble); }

inline double value(const torch::Tensor& t) { return t.item<double>(); }

/// Expects `f()` to throw a ConfigError whose message contains `text`.
template <typename F>
void expect_config_error(F&& f, const std::string& text) {
  try {
    f();
    FAIL() << "expected ConfigError containing '" << text << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

}  // namespace rankwise::test
