#pragma once
/// \file optimizer_state.h
/// An optimizer's complete state in the layout of Python's torch.optim.Optimizer.state_dict()
/// (`{"state": {index: {...}}, "param_groups": [{options..., "params": [indices]}]}`), so runs
/// move between C++ and Python and resume with every hyper-parameter. SGD, Adam, AdamW, RMSprop
/// and Adagrad; each one's keys: docs/checkpoints.md#the-optimizers-state_dict.

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <string>

namespace rankwise::checkpoint {

/// The optimizer's state_dict (see the file comment). Tensors are the
/// optimizer's own (no copy): save the result before the next step. Any
/// rank; no communication. Throws CheckpointError for an optimizer type not
/// listed above (LBFGS, ...).
c10::IValue optimizer_state_dict(const torch::optim::Optimizer& optimizer);

/// The Python class name optimizer_state_dict() writes for `optimizer`
/// ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad"). Throws CheckpointError
/// for other types.
std::string optimizer_type_name(const torch::optim::Optimizer& optimizer);

/// Restores a state_dict of optimizer_state_dict() or Python's `optimizer.state_dict()`: every
/// group's options and parameter's state (onto the parameter's device, floating state in its
/// dtype), replacing the optimizer's, all checked first; also rankwise's older per-parameter
/// format (with a note). Any rank; no communication. Throws CheckpointError naming group,
/// parameter and key when groups, parameters, shapes or keys differ, or when an option
/// libtorch lacks is set.
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& state_dict);

}  // namespace rankwise::checkpoint
