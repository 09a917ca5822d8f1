#pragma once
/// \file checkpoint.h
/// Replicated checkpoints: rank 0 writes atomically while the others wait;
/// every rank loads onto the CPU or onto its own device.
///
/// A checkpoint is a c10::Dict<std::string, IValue> in the zip format of
/// Python's `torch.save` of a dict, written by PyTorch's own serializer, so
/// `torch.load(path, map_location="cpu")` in Python reads it. A CRC-32 (zlib)
/// of the file is recorded in the zip's archive comment at save and verified
/// at load.

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <torch/arg.h>

#include <chrono>

#include <string>
#include <vector>

namespace rankwise::checkpoint {

/// The content of a checkpoint: an ordered map from names to values (tensor,
/// integer, double, string, StateDict, ...), saved as a Python dict.
class Checkpoint {
 public:
  Checkpoint();
  /// Sets `key` (replacing an existing value).
  void insert(const std::string& key, c10::IValue value);
  /// The value of `key`; throws CheckpointError listing the keys present when absent.
  const c10::IValue& at(const std::string& key) const;
  bool contains(const std::string& key) const;
  /// Keys in insertion order.
  std::vector<std::string> keys() const;
  /// The underlying dict (string -> Any).
  const c10::impl::GenericDict& dict() const { return dict_; }

 private:
  c10::impl::GenericDict dict_;
};

/// Saves `state` to `path`. Collective (every rank, same order): rank 0
/// serializes and writes a temporary file in the same directory, fsyncs it,
/// renames it over `path` and fsyncs the directory (POSIX rename is atomic);
/// the other ranks wait. Returns on every rank once the file is complete and
/// durable. If rank 0 fails (bad directory, permission, disk full, `path`
/// is a directory, a tensor in `state` is undefined: the error names its
/// key), every
/// rank throws the same CheckpointError and the previous file at `path` is
/// untouched. While writing, rank 0 holds an exclusive lock on `path`.lock
/// (flock(2), released even if the process is killed): a second process
/// saving to the same path at the same time (another launcher, or ranks that
/// each call save without a process group) is refused with a CheckpointError
/// naming the holder. Holding it, rank 0 removes the temporary files
/// (`path.tmp.*`) of an earlier save to `path` that was killed, with a note.
/// Without a process group it simply writes the file.
/// The other ranks wait for rank 0 at most the process group's timeout
/// (InitOptions::timeout, 300 s by default): raise it for checkpoints that
/// take longer to write, or they throw TimeoutError while rank 0 writes.
void save(const std::string& path, const Checkpoint& state);

/// Throws CheckpointError when the directory of `path` does not exist or is
/// not writable, or `path` is itself a directory, so a run can fail at start rather than at its first save.
/// Any rank; no communication.
void check_checkpoint_path(const std::string& path);

/// Reads a checkpoint onto the CPU (tensors saved from a GPU come back on the
/// CPU; move them to this rank's device afterwards). Any rank, typically
/// every rank. The recorded CRC-32 is verified before anything is unpickled;
/// files written by Python's torch.save carry none and are read unverified.
/// Throws CheckpointError naming the file when it is missing, truncated, torn,
/// altered (checksum mismatch) or not a checkpoint.
Checkpoint load(const std::string& path);

/// Reads a checkpoint as load(path) does, then puts every tensor in it
/// (also those nested in dicts, lists and tuples: state dicts, optimizer
/// states) on `device`, as Python's `torch.load(path, map_location=device)`.
/// Typically `rankwise::checkpoint::load(path, rankwise::device())` on every rank: each
/// gets its copy on its own GPU, or on the CPU. Any rank. Throws
/// CheckpointError as load() does; c10::Error when `device` is not available.
Checkpoint load(const std::string& path, const c10::Device& device);

/// Options of load_collective() and CheckpointManager::load_latest_collective()
/// (setters and getters as torch::nn options).
///
/// Example:
/// \code
///   auto state = rankwise::checkpoint::load_collective("ckpts/last.pt",
///       rankwise::checkpoint::CollectiveLoadOptions().stale_timeout(std::chrono::seconds(30)));
/// \endcode
struct CollectiveLoadOptions {
  /// How long a rank waits for its own view of the file to become the one
  /// rank 0 read, before it receives the bytes from rank 0 instead. On a
  /// network filesystem a barrier orders the processes but not what each
  /// node sees: NFS revalidates a file when it is opened (close-to-open
  /// consistency), but its directory and attribute caches may show the
  /// previous file, or none, for a few seconds (acregmin/acdirmin, 3-30 s by
  /// default). Default 10 s.
  TORCH_ARG(std::chrono::milliseconds, stale_timeout) = std::chrono::seconds(10);
  /// The directory is on each node's own disk (not shared): ranks that do
  /// not see rank 0's file receive its bytes from rank 0 at once, without
  /// waiting. Default false.
  TORCH_ARG(bool, node_local) = false;
};

/// Reads the checkpoint at `path` as rank 0 sees it, on every rank, onto the
/// CPU, so that every rank resumes from the same bytes whatever its node's
/// view of the filesystem. Collective: every rank, same order (without a
/// process group, or at world size 1, it is load(path)).
///
/// Rank 0 opens the file and announces its identity (size and the CRC-32 its
/// trailer records; for a file without one, the CRC-32 of its bytes). Every
/// other rank opens `path` and compares: a rank whose view is missing,
/// older, torn or another file waits, rereading every 100 ms, up to
/// `options.stale_timeout` (0 with `node_local`). Ranks that still do not
/// see it receive the file's bytes from rank 0 (a broadcast of its size,
/// then of the bytes; rank 0 prints one note naming those ranks, their hosts
/// and what they saw). Every rank then verifies the CRC-32 before it
/// unpickles, as load() does: nothing torn or stale is ever returned.
///
/// Throws CheckpointError on every rank when rank 0 cannot read the file
/// (missing, corrupt, not a checkpoint: rank 0's message), and on a rank
/// whose own copy, identical in size and recorded CRC, fails verification.
Checkpoint load_collective(const std::string& path, CollectiveLoadOptions options = {});

/// A copy of `checkpoint` whose tensors are on `device` (see load(path,
/// device)); `checkpoint` is left as it was. Tensors already there are shared,
/// not copied. E.g. for CheckpointManager::load_latest():
/// `rankwise::checkpoint::to_device(*latest, rankwise::device())`. Any rank, no
/// communication.
Checkpoint to_device(const Checkpoint& checkpoint, const c10::Device& device);

/// Verifies the recorded CRC-32 of a checkpoint without unpickling it: true
/// when it matches, false when the file carries no checksum (written by
/// Python's torch.save: a complete zip without rankwise's record). Any rank.
/// Throws CheckpointError as load() does: for a missing, corrupt or
/// truncated file, or one that is not a zip at all.
bool verify(const std::string& path);

}  // namespace rankwise::checkpoint
