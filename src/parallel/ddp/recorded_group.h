#pragma once
/// \file recorded_group.h
/// The c10d group that DistributedDataParallel's Reducer works on: the
/// rankwise group's own c10d group, with every all_reduce the Reducer
/// launches (its gradient buckets, and with find_unused_parameters its map of
/// used parameters) recorded in the rankwise group's flight recorder. So the
/// progress each rank publishes, the launcher's hang report and the recorder's
/// dump show a rank that waits in DDP's backward, or never reached it.
/// A rank in DDP's join() shadows these all_reduces through the same group,
/// so every rank records the same sequence (which debug mode compares).
/// Not checked in debug mode (a rank cannot know the others' buckets before
/// they are launched, and the Reducer launches them from autograd's thread).

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>
#include <string>

namespace rankwise::dist {
class ProcessGroup;
}  // namespace rankwise::dist

namespace rankwise::parallel::ddp {

/// A c10d::ProcessGroup of `group`'s rank and size whose all_reduce runs on
/// group.c10d_group() and is recorded (group.record_launched) under the name
/// `what()` returns at launch, e.g. "DistributedDataParallel step 3:
/// gradients"; its broadcast (the Reducer's rebuilt bucket layout) is
/// recorded too; all_gather and barrier run there unrecorded. `group`
/// must outlive it. Any rank may build it; it is not a collective.
c10::intrusive_ptr<c10d::ProcessGroup> make_recorded_group(dist::ProcessGroup& group,
                                                           std::function<std::string()> what);

}  // namespace rankwise::parallel::ddp
