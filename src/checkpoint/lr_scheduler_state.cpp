#include "rankwise/checkpoint/lr_scheduler_state.h"

#include "core/check.h"

#include "rankwise/error.h"

namespace rankwise::checkpoint {
namespace {

// LRScheduler's step count is a protected member; a derived type may name it,
// and the pointer to member reaches it on any LRScheduler.
struct StepCount : torch::optim::LRScheduler {
  static unsigned& of(torch::optim::LRScheduler& scheduler) {
    return scheduler.*(&StepCount::step_count_);
  }
};

}  // namespace

c10::IValue lr_scheduler_state_dict(const torch::optim::LRScheduler& scheduler) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("step_count",
               static_cast<int64_t>(StepCount::of(const_cast<torch::optim::LRScheduler&>(scheduler))));
  return state;
}

void load_lr_scheduler_state_dict(torch::optim::LRScheduler& scheduler,
                                  const c10::IValue& state_dict) {
  if (!state_dict.isGenericDict() || !state_dict.toGenericDict().contains("step_count") ||
      !state_dict.toGenericDict().at("step_count").isInt() ||
      state_dict.toGenericDict().at("step_count").toInt() < 0) {
    core::raise<CheckpointError>(
        "the learning-rate scheduler state must be {{\"step_count\": int >= 0}}, as "
        "lr_scheduler_state_dict() writes it");
  }
  StepCount::of(scheduler) =
      static_cast<unsigned>(state_dict.toGenericDict().at("step_count").toInt());
}

}  // namespace rankwise::checkpoint
