#include "fabric/checkpoint_schedule.h"

#include <utility>

#include "rankwise/log.h"

namespace rankwise::fabric {

bool CheckpointSchedule::save_now(const CheckpointStore& store, int64_t step, bool epoch_end, bool run_end,
                                  bool accumulating) {
  if (store.should_save(step, epoch_end) && deferred_since_ < 0) deferred_since_ = step;
  if (deferred_since_ < 0) return false;
  if (accumulating && !run_end) {
    note_deferral();
    return false;
  }
  note_pending_gradients(step, accumulating, "the run ended between optimizer steps");
  deferred_since_ = -1;
  return true;
}

void CheckpointSchedule::note_deferral() {
  if (noted_deferral_) return;
  noted_deferral_ = true;
  print0("note: the checkpoint due at step {} waits for the optimizer step: gradients "
         "accumulated under no_sync() are pending, and a checkpoint holds none (this note is "
         "shown once)",
         deferred_since_);
}

void CheckpointSchedule::note_pending_gradients(int64_t step, bool accumulating, const char* why) {
  if (noted_pending_ || !accumulating) return;
  noted_pending_ = true;
  print0("note: the checkpoint of step {} is saved while gradients accumulated under no_sync() "
         "are pending ({}); a checkpoint holds no gradients, so a run resumed from it loses those "
         "micro-batches' gradients and will not match an uninterrupted run; save after the "
         "optimizer step",
         step, why);
}

void CheckpointSchedule::add(const CheckpointStore::Timings& timings) {
  since_record_.blocked_ms += timings.blocked_ms;
  since_record_.waited_ms += timings.waited_ms;
  saved_since_record_ = true;
}

std::optional<CheckpointStore::Timings> CheckpointSchedule::take() {
  if (!std::exchange(saved_since_record_, false)) return std::nullopt;
  return std::exchange(since_record_, CheckpointStore::Timings());
}

}  // namespace rankwise::fabric
