#pragma once
/// \file root_cause.h
/// Which worker of a failed attempt is its root cause.

#include <cstddef>
#include <optional>
#include <vector>

#include <string>

#include "launch/workers/summary.h"
#include "wire/collective_progress.h"

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

/// A worker that left early, in an attempt whose root cause `root`
/// (pick_root_cause) failed with an error that only says that a peer is gone
/// (e.g. early stopping decided on one rank: it returned from main while the
/// others were still in, or entering, collectives). It wrote no error file,
/// and its progress record (`records`, index = rank) says it destroyed its
/// process group before the launcher asked it to stop, or it exited with
/// code 0 unasked (or asked only after that failure). The earliest such, or
/// nullopt (none, or the root cause's error is a primary one).
std::optional<std::size_t> pick_early_exit(
    const std::vector<WorkerRecord>& workers, std::optional<std::size_t> root,
    const std::vector<std::optional<wire::CollectiveProgress>>& records);

/// What the early exit of rank `rank` was, from every rank's last progress
/// record (index = rank; nullopt: none): "ended with exit code 0 (returned
/// from main or called exit) at step 8, while ranks 1, 2 were in all_reduce
/// #25 (Long [1], sum) at train.cpp:95", without the step or the others'
/// collectives when their records do not say them.
std::string describe_early_exit(int rank,
                                const std::vector<std::optional<wire::CollectiveProgress>>& records);

}  // namespace rankwise::launch::workers
