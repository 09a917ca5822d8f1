#pragma once
/// Fault injection for checkpoint tests (never set it in production).
///
/// RANKWISE_CHECKPOINT_FAULT holds one of:
///   sleep_ms=N       sleep N ms once, after the first bytes of the temporary file
///   kill_at_byte=N   SIGKILL this process once N bytes of the temporary file are written
///   kill_at=PHASE    SIGKILL this process at PHASE: before-fsync, before-rename,
///                    before-dir-fsync, before-latest, before-prune, before-publish
///                    (save_sharded: rank 0, before it renames the directory into place)
///   kill_at=PHASE@N  the same at the N-th arrival at PHASE (N >= 1), e.g. the third save's
///   fail_at=PHASE[@N] throw a CheckpointError there instead (a failed write)
/// It is read once per process (through get_env). A malformed value is a
/// ConfigError naming the variable.
#include <cstddef>
#include <string>

namespace rankwise::checkpoint::io {

/// Called by the writer after each chunk, with the bytes written so far.
void fault_after_bytes(std::size_t written);
/// Called at the named phase of a save.
void fault_at(const char* phase);

}  // namespace rankwise::checkpoint::io
