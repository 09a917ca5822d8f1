#pragma once
/// Where a checkpoint file (checkpoint_file.h) whose whole-file CRC-32 does
/// not match was changed, for `rankwise-ckpt verify`: each zip entry's bytes
/// against the CRC-32 its central directory and data descriptor record, its
/// local header against the directory, and, for a storage entry, the keys of
/// the tensors it holds (read from data.pkl when that is intact).
#include <string>
#include <vector>

namespace rankwise::checkpoint::torch_save {

/// One line per damaged part, e.g. "entry 'archive/data/3' (the storage of
/// 'model.fc1.weight'): its bytes' CRC-32 is 1a2b3c4d, the zip records
/// 5e6f7a8b"; a damaged directory or end record is one line; damage found in
/// none of them (padding, unused header fields, the trailer) is one line
/// saying that no key's bytes changed. Reads the file at `path` once more;
/// throws CheckpointError only when it cannot be read.
std::vector<std::string> locate_damage(const std::string& path);

}  // namespace rankwise::checkpoint::torch_save
