#pragma once
// Which submodules of a model are units (docs/fsdp.md, "Units").
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "rankwise/parallel/fully_sharded.h"

namespace rankwise::parallel::fsdp {

struct UnitSpec {
  std::string name;  // the submodule's name; "" for the root unit
  std::vector<std::string> parameters;  // the names of its parameters, in the model's order
};

/// The units `policy` picks in `root` (outermost first, in registration
/// order), then the root unit with every parameter no unit holds. A parameter
/// shared between units (tied weights) belongs to the root unit. Throws
/// ConfigError when a non-default policy matches no submodule.
std::vector<UnitSpec> find_units(const torch::nn::Module& root, const UnitPolicy& policy);

}  // namespace rankwise::parallel::fsdp
