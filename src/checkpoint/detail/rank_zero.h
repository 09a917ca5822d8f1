#pragma once
#include <functional>
#include <string>

namespace rankwise::detail {

/// Runs `work` on rank 0 only; the others wait. Collective (every rank, same
/// order) when a process group is initialized; the broadcast of rank 0's
/// outcome doubles as the barrier, so no rank returns before the work is
/// done. If `work` throws on rank 0, every rank throws CheckpointError with
/// its message and `what` (e.g. "the save by rank 0").
void on_rank_zero(const std::function<void()>& work, const std::string& what);

}  // namespace rankwise::detail
