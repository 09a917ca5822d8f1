#pragma once
// One-line notes about checkpoints, printed once per job.

#include <string>

namespace rankwise::checkpoint::io {

/// Writes `text` and a newline to stderr on rank 0 (or without a process
/// group): every rank looks at the same files, so one note is enough.
void note(const std::string& text);

}  // namespace rankwise::checkpoint::io
