#pragma once
// rankwise-ckpt (tools/rankwise-ckpt/main.cpp; docs/checkpoint-tool.md):
// inspect, verify, convert and diff the checkpoints rankwise writes and
// reads. Replicated checkpoints are a file (save(), or Python's torch.save
// of a dict); sharded ones a directory (save_sharded(), or Python's dcp.save).
// Here as a function so that tests drive it in-process (starting a program
// that links libtorch costs most of a second).
#include <ostream>

namespace rankwise::checkpoint::tool {

/// Exit status of run(): good; the check found something (verify: damaged,
/// or nothing to verify; diff: differences); the command could not run
/// (usage, a missing path, something that is not a checkpoint, an
/// unreadable source or unwritable target), with one line on `err`.
constexpr int kGood = 0;
constexpr int kFound = 1;
constexpr int kBadInput = 2;

/// Runs `rankwise-ckpt argv[1..]`: results on `out`, errors on `err`.
/// Local: no process group. Returns the exit status; throws nothing.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace rankwise::checkpoint::tool
