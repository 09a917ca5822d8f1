#pragma once
// When the Fabric's scheduled checkpoints (every N steps, epoch ends) are
// saved. One that falls while gradients accumulated under no_sync() are
// pending would lose them on resume (a checkpoint holds no gradients): it
// waits for the next batch whose backward synchronized (the optimizer's
// step), so that resume stays exact; at the run's end it is saved anyway,
// with a note. Also what saves cost training, for the metrics log.
#include <cstdint>
#include <optional>

#include "fabric/checkpoint_store.h"

namespace rankwise::fabric {

class CheckpointSchedule {
 public:
  // Whether a scheduled checkpoint is to be saved now, after step `step`
  // (every rank alike): due by `store`'s schedule or deferred earlier, and
  // no gradients pending (`accumulating`), unless the run ends. Local.
  bool save_now(const CheckpointStore& store, int64_t step, bool epoch_end, bool run_end, bool accumulating);

  // Says once that the checkpoint of `step` is saved while accumulated
  // gradients are pending (`why`): a run resumed from it cannot match an
  // uninterrupted one.
  void note_pending_gradients(int64_t step, bool accumulating, const char* why);

  // A save's (or wait's) timings, for the next step record.
  void add(const CheckpointStore::Timings& timings);
  // The milliseconds saves blocked and waited since the last call, if a
  // save happened since (else nullopt); starts a new count.
  std::optional<CheckpointStore::Timings> take();

 private:
  void note_deferral();

  // The step at which a scheduled checkpoint fell mid-accumulation; -1: none.
  int64_t deferred_since_ = -1;
  bool noted_deferral_ = false;
  bool noted_pending_ = false;
  CheckpointStore::Timings since_record_;
  bool saved_since_record_ = false;
};

}  // namespace rankwise::fabric
