#pragma once
/// Checks on a value about to be saved, so that an error names the key at
/// fault rather than the pickler's internals.
#include <ATen/core/ivalue.h>

namespace rankwise::checkpoint::pickle {

/// Throws CheckpointError naming where in `root` (a dict of the checkpoint's
/// entries) an undefined tensor sits, as a path of keys and indices, e.g.
/// "'optimizer' -> 'state'[3]"; the pickler would fail on it without naming
/// it. Walks dicts, lists and tuples, each container once (no recursion).
void check_saveable(const c10::IValue& root);

}  // namespace rankwise::checkpoint::pickle
