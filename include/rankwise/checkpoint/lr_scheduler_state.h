#pragma once
/// \file lr_scheduler_state.h
/// The state of a libtorch learning-rate scheduler (`torch::optim::LRScheduler`
/// subclasses such as `torch::optim::StepLR`): `{"step_count": int}`, so a
/// resumed run continues the schedule where it stopped (not Python's
/// state_dict; see docs/checkpoints.md#exact-resume).

#include <ATen/core/ivalue.h>
#include <torch/optim/schedulers/lr_scheduler.h>

namespace rankwise::checkpoint {

/// The scheduler's state. Any rank; no communication.
c10::IValue lr_scheduler_state_dict(const torch::optim::LRScheduler& scheduler);

/// Restores what lr_scheduler_state_dict() wrote. Restore the optimizer's
/// state too (its learning rates). Any rank; no communication. Throws
/// CheckpointError when `state_dict` is not such a state.
void load_lr_scheduler_state_dict(torch::optim::LRScheduler& scheduler,
                                  const c10::IValue& state_dict);

}  // namespace rankwise::checkpoint
