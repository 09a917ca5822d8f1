#pragma once
// What a sharded save writes (docs/checkpoint-format.md): rank 0's temporary
// directory, each rank's data file and its report, and on each storage
// node's leader .metadata, the manifest and the rename into place. The
// phases that run them across ranks are in save_phases.h.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "checkpoint/sharded/save_phases.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint::sharded {

// Rank 0: a new temporary sibling directory of `dir`. Throws CheckpointError.
std::string make_temp_dir(const std::string& dir);
// This rank's data file in `tmp` (checksummed, fsynced) and its report for the others.
nlohmann::json write_part(const std::string& tmp, int rank, int leader, const ShardedState& state,
                          const PickledObjects& pickled);
// Throws CheckpointError unless `dir` is absent, an empty directory or a sharded checkpoint.
void check_replaceable(const std::string& dir);
// A storage node's leader: checks every rank's report, writes .metadata and the manifest into `tmp`.
void prepare(const std::string& dir, const std::string& tmp, const std::vector<std::string>& reports);
// A storage node's leader: puts `tmp` at `dir` (an earlier checkpoint swapped out atomically, then removed).
void publish_directory(const std::string& tmp, const std::string& dir);

}  // namespace rankwise::checkpoint::sharded
