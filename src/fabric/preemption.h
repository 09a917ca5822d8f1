#pragma once
// Preemption of a Fabric run (docs/fabric.md#preemption): while
// Fabric::epochs() runs with a checkpoint directory, a SIGTERM (forwarded by
// rankwise-run from a scheduler) is only noted; the ranks agree on it at the
// next check (every `every` training batches, and at each epoch's end), save
// the current step and exit with wire::kPreemptedExitCode. A SIGTERM 2 s or
// more after the noted one (sooner, it is a copy of the same request), or the
// launcher's own stop (wire::kStopNowSignalValue), ends the process at once.
// One per process.
#include <cstdint>

namespace rankwise::fabric {

class Preemption {
 public:
  Preemption() = default;
  Preemption(const Preemption&) = delete;
  Preemption& operator=(const Preemption&) = delete;
  ~Preemption() { disarm(); }

  // Installs the SIGTERM handler (once); checks every `every` batches.
  void arm(int64_t every);
  // Restores SIGTERM's earlier disposition; a SIGTERM noted and not yet
  // acted on is raised again (the process ends as it would have), unless an
  // exception is unwinding (it ends the process, reported).
  void disarm();
  bool armed() const { return armed_; }

  // After a training batch, every rank alike: every `every`-th call agrees
  // (dist::any) on whether some rank got SIGTERM. Returns agreed().
  bool after_batch();
  // Agrees now (an epoch's end). Collective while armed; false otherwise.
  bool check_now();
  // Whether the ranks agreed to stop at the next step's end.
  bool agreed() const { return agreed_; }

 private:
  bool armed_ = false;
  bool agreed_ = false;
  int64_t every_ = 1;
  int64_t batches_ = 0;
};

}  // namespace rankwise::fabric
