#pragma once
// Native stack traces of every thread on request: rankwise-run's hang report
// sends kStackDumpSignal to a hung worker, whose handler writes a backtrace
// of each of its threads (glibc's backtrace_symbols_fd: "object(symbol+offset)
// [address]", C++ names mangled; the launcher demangles them) to the file
// named by RANKWISE_STACK_DUMP_FILE when the handler was installed, else to
// stderr. The file ends with kStackDumpEnd once every thread was written.
#include <csignal>

namespace rankwise {
namespace detail {

/// The signal that asks for a dump (SIGUSR2).
constexpr int kStackDumpSignal = SIGUSR2;
/// Last line of a complete dump.
constexpr const char* kStackDumpEnd = "end of stack dump";

/// Installs the handler once per process, unless the program already handles
/// kStackDumpSignal (then it is left alone). Returns whether the handler is
/// installed. Call from any thread; cheap after the first call.
bool install_stack_dump();

}  // namespace detail
}  // namespace rankwise
