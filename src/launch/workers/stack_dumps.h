#pragma once
/// \file stack_dumps.h
/// The launcher's side of a hang report's stack dumps: it signals each
/// worker process that installed rankwise's handler (wire/stack_dump_request.h)
/// and reads the file the worker writes.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace rankwise::launch::workers {

/// A worker process asked for its threads' stacks.
struct StackDumpTarget {
  int rank = 0;      ///< its rank, for the text
  pid_t pid = -1;    ///< the process that installed the handler
  std::string file;  ///< where it writes its dump (its RANKWISE_STACK_DUMP_FILE)
};

/// Removes each target's old file and sends it wire::kStackDumpSignal; waits
/// until every target that got the signal wrote a complete dump, at most
/// `wait`; returns what to print: for each such target, "rankwise-run: stacks
/// of rank R:" and its stacks (demangled, indented), or that it wrote no
/// stack dump within `wait`.
std::string request_stack_dumps(const std::vector<StackDumpTarget>& targets,
                                std::chrono::milliseconds wait);

}  // namespace rankwise::launch::workers
