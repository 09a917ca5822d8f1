#pragma once
// Preemption between rankwise-run and its workers. A SIGTERM that the
// launcher forwards (from a scheduler: Slurm, Kubernetes, torchrun's own
// stop) asks a Fabric run to save and exit with kPreemptedExitCode. A
// SIGTERM the launcher sends on its own account (another worker failed, a
// hang, a new elastic round) is sent with sigqueue() carrying
// kStopNowSignalValue: the worker ends at once, as without a handler.

namespace rankwise::wire {

// A worker's (and then rankwise-run's) exit status after a preemption that
// saved a checkpoint of the current step: EX_TEMPFAIL, "try again later".
constexpr int kPreemptedExitCode = 75;
// si_value.sival_int of the launcher's own stop signals.
constexpr int kStopNowSignalValue = 0x72776b73;

}  // namespace rankwise::wire
