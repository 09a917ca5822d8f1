#pragma once
/// \file state_dict.h
/// state_dict helpers for torch::nn::Module, in the layout PyTorch uses, so
/// files interoperate with Python's torch.load. Optimizers:
/// checkpoint/optimizer_state.h.

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <string>

namespace rankwise::checkpoint {

/// Ordered name -> tensor map (parameters, then buffers, in registration
/// order), like Python's `module.state_dict()`. Tensors are detached views
/// of the module's own storage.
using StateDict = c10::Dict<std::string, torch::Tensor>;

/// The module's parameters and buffers by their dotted names (no wrapper prefix).
StateDict state_dict(const torch::nn::Module& module);

/// Converts a checkpoint entry (a dict of tensors, e.g. `ckpt.at("model")`)
/// back into a StateDict. Throws CheckpointError when it is not one.
StateDict to_state_dict(const c10::IValue& value);

/// Copies `state` into the module's parameters and buffers (no autograd).
/// Keys prefixed "module." (written by PyTorch's Python DDP) are accepted.
/// With strict, missing and unexpected keys are an error listing them; a shape
/// mismatch always is, naming the key and both shapes. Throws CheckpointError.
void load_state_dict(torch::nn::Module& module, const StateDict& state, bool strict = true);

}  // namespace rankwise::checkpoint
