#pragma once
/// \file lr_scheduler_state.h
/// The state of a libtorch learning-rate scheduler (`torch::optim::LRScheduler`
/// subclasses such as `torch::optim::StepLR`), so a resumed run continues the
/// schedule where it stopped.
///
/// A libtorch scheduler's state is its step count (how often `step()` was
/// called); the learning rates themselves live in the optimizer's
/// param_groups, which optimizer_state_dict() saves. Layout:
/// `{"step_count": int}`. (Python's schedulers count differently: their
/// constructor already takes one step, so this is not Python's state_dict.)
///
/// A hand-written schedule that computes the learning rate from the epoch or
/// step (e.g. `lr = base * 0.5^epoch`, set at each epoch start) needs nothing
/// more: TrainingState restores epoch, step and every param_group's lr. A
/// schedule with state of its own keeps it in TrainingState::extras.

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
