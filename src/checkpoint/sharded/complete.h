#pragma once
// Whether a sharded checkpoint directory is complete, cheaply: what
// ShardedCheckpointManager::latest() asks of each candidate before every rank
// reads (and verifies) its chunks.
#include <string>

namespace rankwise::checkpoint::sharded {

/// Throws CheckpointError, naming `dir` and what is wrong, unless `dir` has
/// `.metadata` and `.rankwise-manifest.json`, the manifest records the CRC-32
/// of that `.metadata`, and every data file the manifest names is at least
/// as long as the records of its chunks (saved to node-local disks, the
/// manifest names several storage nodes: only the files of the nodes with a
/// file on this disk, all of theirs, and at least one node). Reads the two small files and stats
/// the data files; the chunks' bytes are verified when they are loaded.
void check_sharded_complete(const std::string& dir);

}  // namespace rankwise::checkpoint::sharded
