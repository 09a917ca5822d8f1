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

/// Saves `state` into the directory `dir`, which appears whole or not at
/// all; rank 0 writes replicated tensors and objects once. Collective: every
/// rank, same order, with the same keys, global shapes, dtypes and object
/// values. Throws CheckpointError on every rank when any rank fails (naming
/// it; nothing is published), when `dir` exists and is not a checkpoint, or
/// when another job is saving to `dir`. Without a process group: a one-rank
/// checkpoint. Details: docs/sharded-checkpoints.md#save_sharded.
void save_sharded(const std::string& dir, const ShardedState& state);

/// Which keys a load accepts beyond exactly the checkpoint's (the default).
///
/// \code
///   // The model's entries of a checkpoint that also holds the optimizer's:
///   rankwise::checkpoint::load_sharded("ckpt/step-100", model_state,
///                          rankwise::checkpoint::ShardedLoadOptions().strict(false));
/// \endcode
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

/// Fills the tensors of `state` (their chunks, in place) and the values of
/// its ObjectEntry entries from the sharded checkpoint `dir`, at any world
/// size, reading only the byte ranges needed, each verified against the
/// manifest's CRC-32s (a `dcp.save` directory has none: unverified). Local:
/// any rank, no communication; every data file it needs must be in this
/// rank's view of `dir`. Throws CheckpointError when `dir` is not a
/// checkpoint, keys (as `options` allows), shapes, dtypes or kinds differ, a
/// chunk is not covered, or a checksum fails.
/// Details: docs/sharded-checkpoints.md#load_sharded.
void load_sharded(const std::string& dir, ShardedState& state, ShardedLoadOptions options = {});

/// load_sharded() of rank 0's view of `dir` on every rank, whatever its own
/// view (node-local disks, stale network caches): a rank waits up to
/// `options.stale_timeout` for its view to match, and receives the bytes of
/// files it does not see from ranks that do; every byte is verified. `keys`
/// as load_sharded()'s `options`. Collective: every rank, same order (without
/// a process group, or at world size 1: load_sharded()). Throws
/// CheckpointError on every rank when any rank fails, naming it, or when no
/// rank sees a needed data file. Details:
/// docs/sharded-checkpoints.md#load_sharded_collective.
void load_sharded_collective(const std::string& dir, ShardedState& state, CollectiveLoadOptions options = {},
                             ShardedLoadOptions keys = {});

}  // namespace rankwise::checkpoint
