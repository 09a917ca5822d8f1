#pragma once
#include <ATen/core/Dict.h>

#include <functional>
#include <string>

namespace rankwise::checkpoint::ranks {

/// Runs `work` on rank 0 only; the others wait. Collective (every rank, same
/// order) when a process group is initialized; the broadcast of rank 0's
/// outcome doubles as the barrier, so no rank returns before the work is
/// done. If `work` throws on rank 0, every rank throws CheckpointError with
/// its message and `what` (e.g. "the save by rank 0"), on the others as
/// "(rank 0's error, raised on rank N for WHAT)".
void on_rank_zero(const std::function<void()>& work, const std::string& what);

/// Runs `work` on the ranks where `mine` is true (each storage node's
/// leader, say); the others wait. Collective (every rank, same order): the
/// all_gather of the outcomes is the barrier. If `work` throws on any rank,
/// every rank throws CheckpointError with each failing rank's message and
/// `what`. Without a process group it runs `work` when `mine`.
void on_ranks(bool mine, const std::function<void()>& work, const std::string& what);

/// A decision taken on rank 0 and known to every rank: rank 0 calls `decide`
/// on an empty dict (string keys; strings, ints, bools as values) and every
/// rank returns what it put there (all_gather_ivalues). A CheckpointError that
/// `decide` throws on rank 0 is thrown on every rank (" (raised on rank 0, ...)"
/// added on the others). Collective: every rank, same order; without a
/// process group it just calls `decide`.
c10::impl::GenericDict decided_on_rank_zero(const std::function<void(c10::impl::GenericDict&)>& decide);

}  // namespace rankwise::checkpoint::ranks
