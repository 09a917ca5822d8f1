#pragma once
/// \file step_stats.h
/// Per-rank heartbeats for `rankwise-run --monitor`: each rank counts its training steps here
/// and the thread that publishes its progress to the store adds the step, samples/s, compute
/// and wait time, loss, RSS and device. rankwise::Fabric calls record_step() per training
/// batch; other programs call it at the end of each step. See docs/monitoring.md.

#include <cstdint>
#include <optional>
#include <string>

namespace rankwise::monitor {

/// Records the end of one training step of this rank that consumed `samples` samples (feeds
/// the samples/s column only), with its local loss (nullopt keeps the last). Step time: since
/// the previous call; its wait part is the time a collective was in flight (DDP's overlapped
/// backward included), the rest compute. Local: never communicates or blocks, any rank, from
/// the training thread; without a group of several ranks it only counts. Throws nothing.
void record_step(int64_t samples, std::optional<double> loss = std::nullopt);

/// The device this rank trains on, as the monitor's table shows it ("cpu",
/// "cuda:0"); default: rankwise::device() as the process group saw it at
/// init(). rankwise::Fabric sets its own. Local, any rank; throws nothing.
void set_device(const std::string& device);

}  // namespace rankwise::monitor
