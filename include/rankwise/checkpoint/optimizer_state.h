#pragma once
/// \file optimizer_state.h
/// An optimizer's complete state in the layout of Python's
/// `torch.optim.Optimizer.state_dict()`, so a run can move between C++ and
/// Python, and a resumed run continues with every hyper-parameter it had.
///
/// Layout (a dict, as PyTorch 1.13 and 2.x write it):
///   "state"         {index: {PyTorch's per-parameter keys}}, only parameters
///                   that have state; index = position of the parameter in
///                   param_groups order (group 0's first parameter is 0)
///   "param_groups"  [{option: value, ..., "params": [indices]}], one per group
///
/// | libtorch       | Python class | options                                   | per-parameter state                      |
/// |----------------|--------------|-------------------------------------------|------------------------------------------|
/// | SGD            | SGD          | lr momentum dampening weight_decay nesterov | momentum_buffer                        |
/// | Adam, AdamW    | Adam, AdamW  | lr betas eps weight_decay amsgrad          | step exp_avg exp_avg_sq [max_exp_avg_sq] |
/// | RMSprop        | RMSprop      | lr alpha eps weight_decay momentum centered | step square_avg [momentum_buffer] [grad_avg] |
/// | Adagrad        | Adagrad      | lr lr_decay weight_decay initial_accumulator_value eps | step sum                    |
///
/// Every group also carries `"maximize": false` (libtorch never maximizes).
/// "step" is written as a 0-dim float32 tensor, as Python's Adam, AdamW and
/// Adagrad do (float64 past 2^24 steps, so it stays exact; Python 1.13's
/// RMSprop writes an int, and both load on either side). Keys Python adds that libtorch has no use for (foreach,
/// fused, capturable, differentiable, initial_lr) are ignored when loading.
/// Identical states give identical bytes: nothing is keyed by an address.
/// The layout names no optimizer type (Python's does not either), so an Adam
/// state loads into an AdamW and the reverse; TrainingState records the type
/// beside it and refuses a mismatch.
/// LBFGS and optimizers not listed are refused with a CheckpointError.

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <string>

namespace rankwise::checkpoint {

/// The optimizer's state_dict (see the file comment). Tensors are the
/// optimizer's own (no copy): save the result before the next step. Any
/// rank; no communication. Throws CheckpointError for an optimizer type not
/// in the table above.
c10::IValue optimizer_state_dict(const torch::optim::Optimizer& optimizer);

/// The Python class name optimizer_state_dict() writes for `optimizer`
/// ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad"). Throws CheckpointError
/// for other types.
std::string optimizer_type_name(const torch::optim::Optimizer& optimizer);

/// Restores a state_dict written by optimizer_state_dict() or by Python's
/// `optimizer.state_dict()` (loaded with rankwise::checkpoint::load): every param_group's
/// options and every parameter's state, replacing what the optimizer had.
/// State tensors are copied, onto each parameter's device (floating-point
/// state in the parameter's dtype, as Python's load_state_dict does).
/// Also accepts the uint8 tensor of rankwise's older format (libtorch's
/// archive): then only per-parameter state is restored and rank 0 prints a
/// note. Any rank; no communication. Throws CheckpointError naming the group,
/// parameter index and key when the numbers of groups or parameters differ,
/// a shape differs, a key is missing (an option, "step", or a state tensor
/// the group's options need, e.g. "max_exp_avg_sq" with amsgrad), or an
/// option libtorch lacks is set (e.g. "maximize": true). A parameter whose
/// state is an empty dict has not been stepped yet and gets no state.
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& state_dict);

}  // namespace rankwise::checkpoint
