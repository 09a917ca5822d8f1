#pragma once
/// \file sharded_checkpoint.h
/// Sharded checkpoints: every rank writes its own chunks into a directory in
/// the layout of PyTorch's torch.distributed.checkpoint (DCP), published
/// atomically; a load at any world size reads only the bytes each rank needs,
/// verified by CRC-32s. The story: docs/sharded-checkpoints.md; the format:
/// docs/checkpoint-format.md.

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <string>
#include <variant>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/sharded_tensor.h"

namespace rankwise::checkpoint {

/// A value that is not a tensor: an int, float, bool, string or None, or a
/// tuple, list or string-keyed dict of them (an optimizer's learning rate,
/// its betas, an epoch counter). Stored as DCP stores a non-tensor value
/// (BytesStorageMetadata): the torch.save bytes of the value, written once,
/// by rank 0; Python's dcp.load gives it back as the Python value.
struct ObjectEntry {
  c10::IValue value;
};

/// One entry of a sharded checkpoint: a ShardedTensor (each rank its
/// chunks), a replicated tensor (CPU; the same on every rank), or a
/// replicated non-tensor value (the same on every rank).
using ShardedEntry = std::variant<ShardedTensor, at::Tensor, ObjectEntry>;

/// The content of a sharded checkpoint, by key (DCP's fully qualified name).
using ShardedState = std::map<std::string, ShardedEntry>;

/// Saves `state` into the directory `dir`, which appears whole or not at all; rank 0 writes
/// replicated entries once. Collective: every rank, same order, same keys, global shapes,
/// dtypes and object values. Throws CheckpointError on every rank when any rank fails (named;
/// nothing published), `dir` exists and is not a checkpoint, or another job saves to it.
/// Without a process group: a one-rank checkpoint. See docs/sharded-checkpoints.md#save_sharded.
void save_sharded(const std::string& dir, const ShardedState& state);

/// Which keys a load accepts beyond exactly the checkpoint's (the default), e.g.
/// ShardedLoadOptions().strict(false) to load the model's entries only.
struct ShardedLoadOptions {
  /// false: keys of the checkpoint that `state` does not hold are skipped,
  /// so a load can take a subset (as PyTorch's `load_state_dict(strict=False)`
  /// skips unexpected keys, and as DCP's load always does). Default true:
  /// they are an error that lists them, which catches a misspelt key.
  TORCH_ARG(bool, strict) = true;
  /// DCP's `allow_partial_load`: keys of `state` that the checkpoint does not
  /// hold are left as they are (rank 0 prints one note listing them), e.g.
  /// a newly added buffer. Default false: an error that lists them.
  TORCH_ARG(bool, allow_partial_load) = false;
};

/// Fills `state`'s tensors (their chunks, in place) and ObjectEntry values from sharded
/// checkpoint `dir`, saved at any world size, reading only the needed byte ranges, each checked
/// against the manifest's CRC-32s. Local: any rank; its view of `dir` must hold the data files.
/// Throws CheckpointError when `dir` is not a checkpoint, keys (per `options`), shapes, dtypes
/// or kinds differ, a chunk is not covered, or a checksum fails. See docs/sharded-checkpoints.md.
void load_sharded(const std::string& dir, ShardedState& state, ShardedLoadOptions options = {});

/// load_sharded() of rank 0's view of `dir` on every rank, whatever its own view: a rank waits
/// up to `options.stale_timeout` for its view to match and receives files it does not see from
/// ranks that do; every byte verified. `keys` as load_sharded()'s `options`. Collective: every
/// rank, same order (no group or world size 1: load_sharded()). Throws CheckpointError on every
/// rank when any rank fails (named) or no rank sees a needed file. See docs/sharded-checkpoints.md.
void load_sharded_collective(const std::string& dir, ShardedState& state, CollectiveLoadOptions options = {},
                             ShardedLoadOptions keys = {});

}  // namespace rankwise::checkpoint
