#pragma once
/// \file step_stats.h
/// Per-rank heartbeats for `rankwise-run --monitor`: each rank counts its
/// training steps here, and the background thread that already publishes
/// its progress to the job's store (about once a second, see
/// process_group.h and docs/hangs-and-debugging.md) adds to that record the
/// step, local samples/s, the step time split into compute and time waiting
/// in collectives, the last local loss, the process's RSS and its device.
/// The launcher shows them as a live table and flags stragglers: DDP's
/// all_reduce evens out every rank's step time, so the rank the others wait
/// for is the one that waits least, i.e. computes most.
///
/// rankwise::Fabric calls record_step() for every training batch; a program
/// without a Fabric calls it at the end of each of its own steps.

#include <cstdint>
#include <optional>
#include <string>

namespace rankwise::monitor {

/// Records the end of one training step of this rank that consumed `samples`
/// samples (this rank's, padding excluded if you like: it only feeds the
/// samples/s column), with its local loss when known (nullopt leaves the last
/// one). The step time is the time since the previous call; its wait part is
/// the time during which a collective of the process group was in flight
/// since then (for DDP's asynchronous bucket all_reduces this includes the
/// backward computation they overlap, on every rank alike), the rest is
/// compute.
///
/// Local: never communicates and never blocks (a few atomic operations, one
/// read of the steady clock, and a wake-up of the thread that publishes the
/// step within 20 ms); any rank, from the training thread. Without
/// a process group of several ranks (e.g. one process without a launcher)
/// nothing is published and the call only counts. Throws nothing.
void record_step(int64_t samples, std::optional<double> loss = std::nullopt);

/// The device this rank trains on, as the monitor's table shows it ("cpu",
/// "cuda:0"); default: rankwise::device() as the process group saw it at
/// init(). rankwise::Fabric sets its own. Local, any rank; throws nothing.
void set_device(const std::string& device);

}  // namespace rankwise::monitor
