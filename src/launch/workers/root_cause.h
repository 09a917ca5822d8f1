#pragma once
/// \file root_cause.h
/// Which worker of a failed attempt is its root cause.

#include <cstddef>
#include <optional>
#include <vector>

#include "launch/workers/summary.h"

namespace rankwise::launch::workers {

/// The index in `workers` (one attempt's local workers, their `error` read) of
/// the root cause, or nullopt when none failed. Candidates are the workers
/// that failed, and those the launcher stopped that had reported an error
/// before it asked them to stop (a rank that raised first may be slow to
/// exit: destructors, process-group teardown). Among them, first those with a
/// primary error or no error file (a crash, a signal, an exit code), then
/// those whose error only says that a peer is gone (`secondary`); within each,
/// the earliest: the error's time, or for a worker without an error file its
/// exit time; a tie goes to the lower index.
std::optional<std::size_t> pick_root_cause(const std::vector<WorkerRecord>& workers);

}  // namespace rankwise::launch::workers
