#pragma once
// The checkpoint file that rank 0 chose, read on every rank: each rank reads
// its own view of the file once it is the one rank 0 read (waiting out a
// network filesystem's stale caches, within a bound), else receives the
// bytes from rank 0 (node-local disks). See rankwise::checkpoint::load_collective().
#include <ATen/core/ivalue.h>

#include <functional>
#include <optional>
#include <string>

#include "rankwise/checkpoint/checkpoint.h"

namespace rankwise::checkpoint::ranks {

/// What read_agreed() read: rank 0's path and the unpickled value.
struct AgreedFile {
  std::string path;
  c10::IValue value;
};

/// Rank 0 calls `choose` (the file to read, or nullopt: none, and then every
/// rank returns nullopt); every rank gets that file's value as load_collective()
/// describes. `choose` runs on rank 0 only; a CheckpointError it throws is
/// raised on every rank. Collective: every rank, same order.
std::optional<AgreedFile> read_agreed(const std::function<std::optional<std::string>()>& choose,
                                      const CollectiveLoadOptions& options);

}  // namespace rankwise::checkpoint::ranks
