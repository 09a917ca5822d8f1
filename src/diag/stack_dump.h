#pragma once
// The worker's side of a stack-dump request (wire/stack_dump_request.h): a
// handler that writes a backtrace of each of the process's threads (glibc's
// backtrace_symbols_fd: "object(symbol+offset) [address]", C++ names
// mangled; the launcher demangles them).
#include "wire/stack_dump_request.h"

namespace rankwise::diag {

/// Installs the handler once per process, unless the program already handles
/// kStackDumpSignal (then it is left alone). Returns whether the handler is
/// installed. Call from any thread; cheap after the first call.
bool install_stack_dump();

}  // namespace rankwise::diag
