#pragma once
/// \file checkpoint/sharded_checkpoint.h
/// Sharded checkpoints: every rank writes its own chunks, in parallel, into
/// a directory that PyTorch's torch.distributed.checkpoint (DCP) reads, and
/// a load at any world size reads only the bytes each rank needs.
///
/// The directory has DCP's FileSystemWriter layout (checked against torch
/// 2.15.0): `.metadata` (the pickled Metadata) and one `__<rank>_0.distcp`
/// file per rank, each chunk in it a torch.save record; Python's
/// `torch.distributed.checkpoint.load` reads it, and load_sharded() reads a
/// directory Python's `dcp.save` wrote. Beyond DCP, `.rankwise-manifest.json`
/// (which DCP ignores) holds CRC-32s (zlib) of every byte a load reads, the
/// directory is published atomically (written under a temporary name,
/// fsynced, renamed into place), and a failure on any rank publishes nothing.
/// The format is described in docs/checkpoint-format.md.

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <variant>

#include "rankwise/checkpoint/sharded_tensor.h"

namespace rankwise {

/// One entry of a sharded checkpoint: a ShardedTensor (each rank its
/// chunks), or a replicated tensor (CPU; the same on every rank).
using ShardedEntry = std::variant<ShardedTensor, at::Tensor>;

/// The content of a sharded checkpoint, by key (DCP's fully qualified name).
using ShardedState = std::map<std::string, ShardedEntry>;

/// Saves `state` into the directory `dir`. Collective: every rank, same
/// order, the same keys with the same global shapes and dtypes.
///
/// Rank 0 creates a temporary sibling directory (`<dir>.rankwise-tmp.XXXXXX`);
/// every rank writes its chunks (empty ones skipped) to its own
/// `__<rank>_0.distcp` there and fsyncs it; a replicated tensor is written
/// once, by rank 0. Every rank's outcome and the CRC-32s of its chunks go to
/// rank 0 (all_gather over the process group), which checks that the ranks
/// agree on keys, shapes and dtypes and that the chunks hold as many
/// elements as each tensor, writes `.metadata` and `.rankwise-manifest.json`
/// (fsynced), renames the directory to `dir` (an atomic exchange when `dir`
/// exists, then the old one is removed) and fsyncs the parent. A failure on
/// any rank (a rank that dies included) throws CheckpointError on every
/// surviving rank naming that rank; nothing is published and the previous
/// checkpoint at `dir` is untouched. Without a process group it writes a
/// one-rank checkpoint.
void save_sharded(const std::string& dir, const ShardedState& state);

/// Fills the tensors of `state` from the sharded checkpoint `dir`, at any
/// world size: each chunk (or replicated tensor) gets the elements of its
/// box, read from the stored chunks that overlap it, and only the byte
/// ranges that hold them (widened to the manifest's 1 MiB checksum blocks).
/// Every byte read is verified against the manifest's CRC-32s when the
/// directory has one (rankwise wrote it); a directory Python's `dcp.save`
/// wrote has none, so its bytes are read unverified. Local: any rank, no
/// communication. Throws CheckpointError when `dir` is not a checkpoint,
/// when keys are missing from it or present only in it (both listed), when
/// a shape or dtype differs, when a chunk is not covered by the stored ones,
/// and when a checksum fails (naming the file, the key and the stored
/// chunk's offsets).
void load_sharded(const std::string& dir, ShardedState& state);

}  // namespace rankwise
