#pragma once
// A stack dump on request: rankwise-run's hang report sends kStackDumpSignal
// to a hung worker, whose handler (diag/stack_dump.h) writes every thread's
// stack to the file named by kStackDumpFileVariable (else to stderr), ending
// with the line kStackDumpEnd once every thread was written.
#include <csignal>

namespace rankwise::wire {

/// The signal that asks for a dump (SIGUSR2).
constexpr int kStackDumpSignal = SIGUSR2;
/// Last line of a complete dump.
constexpr const char* kStackDumpEnd = "end of stack dump";
/// The environment variable that names a worker's dump file.
constexpr const char* kStackDumpFileVariable = "RANKWISE_STACK_DUMP_FILE";

}  // namespace rankwise::wire
