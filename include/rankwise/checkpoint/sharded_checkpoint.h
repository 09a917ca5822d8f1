#pragma once
/// \file sharded_checkpoint.h
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

/// Saves `state` into the directory `dir`. Collective: every rank, same
/// order, the same keys with the same global shapes and dtypes, and the
/// same values of ObjectEntry entries (each rank's is pickled and its CRC-32
/// compared; rank 0 writes it).
///
/// Rank 0 locks `<dir>.lock` (flock(2), held until it returns, released
/// even if the process is killed: a second job saving to `dir` at the same
/// time is refused with a CheckpointError naming the holder), removes the
/// temporary directories a killed save to `dir` left, then creates a
/// temporary sibling directory (`<dir>.rankwise-tmp.XXXXXX`)
/// and tells the others its name; every other rank then creates the same
/// path too. Where it already exists (mkdir's EEXIST, decided by the
/// filesystem, on NFS by the server) the rank shares the storage of the rank
/// that created it; where it does not (a node's own disk, which does not see
/// rank 0's directory) the rank becomes the leader of a new storage node. So
/// node-local disks and a shared filesystem are told apart automatically,
/// with no option. Every rank writes its chunks (empty ones skipped) to its
/// own `__<rank>_0.distcp` in its storage node's directory and fsyncs it; a
/// replicated tensor is written once, by rank 0. Every rank's outcome and
/// the CRC-32s of its chunks go to every rank (all_gather over the process
/// group). Each storage node's leader checks that the ranks agree on keys,
/// shapes and dtypes and that the chunks hold as many elements as each
/// tensor, and writes `.metadata` and `.rankwise-manifest.json` (the same
/// bytes on every node; the manifest's "nodes" say which ranks, hosts and
/// data files each storage node holds). Only when every node has them does
/// each leader rename its directory to `dir` (an atomic exchange when `dir`
/// exists, then the old one is removed) and fsync the parent: each node's
/// publication is atomic. A failure on any rank before that (a rank that
/// dies included) throws CheckpointError on every surviving rank naming
/// that rank; nothing is published on any node and the previous checkpoint
/// at `dir` is untouched. If a leader then fails to rename, every rank
/// throws naming it; its node keeps the previous checkpoint and
/// load_sharded_collective() refuses the mix (its data files are missing).
/// Without a process group it writes a one-rank checkpoint.
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

/// Fills the tensors of `state` from the sharded checkpoint `dir`, at any
/// world size, and replaces the value of every ObjectEntry with the stored
/// one (whatever it held; list what a checkpoint holds with
/// read_sharded_metadata()): each chunk (or replicated tensor) gets the elements of its
/// box, read from the stored chunks that overlap it, and only the byte
/// ranges that hold them (widened to the manifest's checksum blocks, 256 KiB when rankwise saves).
/// Every byte read is verified against the manifest's CRC-32s when the
/// directory has one (rankwise wrote it); a directory Python's `dcp.save`
/// wrote has none, so its bytes are read unverified. Local: any rank, no
/// communication. Throws CheckpointError when `dir` is not a checkpoint,
/// when keys are missing from it or present only in it (both listed; see
/// `options` for loading a subset, or into a state with keys of its own), when
/// a shape or dtype differs, when an entry is a tensor on one side and an
/// object on the other, when a chunk is not covered by the stored ones, when
/// a stored object is not a value libtorch can unpickle (a Python class
/// instance), and when a checksum fails (naming the file, the key and the stored
/// chunk's offsets). Every data file it needs must be on this rank's view
/// of `dir`: after a save to node-local disks, or where the nodes' views of a
/// network filesystem may be stale, use load_sharded_collective().
void load_sharded(const std::string& dir, ShardedState& state, ShardedLoadOptions options = {});

/// load_sharded() for every rank at once, whatever its view of `dir`: node-
/// local disks (each node holds only its own ranks' data files) or a
/// network filesystem with stale caches. Collective: every rank, same order
/// (without a process group, or at world size 1, it is load_sharded()).
///
/// Rank 0 reads `.metadata` and the manifest and sends them to every rank
/// (all_gather): rank 0's view decides which checkpoint is loaded. Every
/// other rank rereads its own view every 100 ms, up to
/// `options.stale_timeout` (0 with `options.node_local`), until its
/// `.metadata` and manifest are the same bytes; only then does it read data
/// files itself, and only those that are there whole. Each rank plans the
/// byte ranges it needs, as load_sharded() does; ranges of files it does not
/// read itself are sent to it by a rank that does (an all_gather of the
/// requests, then broadcasts from each serving rank, in windows of at most
/// 64 MiB: c10d's collectives, no transport of our own), in two rounds (the
/// records' headers, then the storage bytes). Every byte, read or received,
/// is verified against the manifest's CRC-32s before it is copied (a
/// directory without a manifest, from Python's dcp.save, is unverified), so
/// nothing torn or stale is ever loaded. Rank 0 prints one note naming the
/// ranks that received bytes. Throws CheckpointError on every rank when any
/// rank fails (naming it and its error, as load_sharded() words it), and
/// when no rank sees a data file that is needed (naming it, who needs it,
/// and the rank and host that wrote it, from the manifest).
/// `keys` as load_sharded()'s `options`.
void load_sharded_collective(const std::string& dir, ShardedState& state, CollectiveLoadOptions options = {},
                             ShardedLoadOptions keys = {});

}  // namespace rankwise::checkpoint
