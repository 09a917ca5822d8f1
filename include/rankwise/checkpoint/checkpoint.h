#pragma once
/// \file checkpoint.h
/// Replicated checkpoints: rank 0 writes atomically while the others wait; every rank loads
/// onto the CPU or its own device. A checkpoint is a dict pickled in torch.save's zip format
/// (Python's torch.load reads it), with a CRC-32 in the zip comment, verified at load.
/// See docs/checkpoints.md.

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

/// Saves `state` to `path` atomically and durably: rank 0 writes (holding `path`.lock), the
/// others wait. Collective: every rank, same order; returns once the file is complete. Throws
/// the same CheckpointError on every rank when rank 0 fails (previous file untouched; names an
/// undefined tensor's key, or another process saving to `path`), TimeoutError past the group's
/// timeout. Without a process group it just writes. See docs/checkpoints.md#save.
void save(const std::string& path, const Checkpoint& state);

/// Throws CheckpointError when the directory of `path` does not exist or is
/// not writable, or `path` is itself a directory, so a run can fail at start
/// rather than at its first save. Any rank; no communication.
void check_checkpoint_path(const std::string& path);

/// Reads a checkpoint onto the CPU (tensors saved from a GPU come back on the
/// CPU; move them to this rank's device afterwards). Any rank, typically
/// every rank. The recorded CRC-32 is verified before anything is unpickled;
/// files written by Python's torch.save carry none and are read unverified.
/// Throws CheckpointError naming the file when it is missing, truncated, torn,
/// altered (checksum mismatch) or not a checkpoint.
Checkpoint load(const std::string& path);

/// load(path), then every tensor in it (nested ones too) on `device`, as
/// Python's `torch.load(path, map_location=device)`; typically
/// `load(path, rankwise::device())` on every rank. Any rank. Throws as
/// load(); c10::Error when `device` is not available.
Checkpoint load(const std::string& path, const c10::Device& device);

/// Options of load_collective() and CheckpointManager::load_latest_collective() (setters and
/// getters as torch::nn options), e.g. CollectiveLoadOptions().stale_timeout(30s).
struct CollectiveLoadOptions {
  /// How long a rank waits for its own view of the file to become the one
  /// rank 0 read (a network filesystem's stale caches), before it receives
  /// the bytes from rank 0 instead. Default 10 s. See
  /// docs/checkpoints.md#several-nodes-shared-or-node-local-disks.
  TORCH_ARG(std::chrono::milliseconds, stale_timeout) = std::chrono::seconds(10);
  /// The directory is on each node's own disk (not shared): ranks that do
  /// not see rank 0's file receive its bytes from rank 0 at once, without
  /// waiting. Default false.
  TORCH_ARG(bool, node_local) = false;
};

/// Reads the checkpoint at `path` as rank 0 sees it, on every rank, onto the CPU: a stale view
/// waits up to `options.stale_timeout`, then receives the bytes from rank 0; each rank verifies
/// the CRC-32 before unpickling. Collective: every rank, same order (no group or world size 1:
/// load(path)). Throws CheckpointError on every rank when rank 0 cannot read the file, and on a
/// rank whose copy fails verification. See docs/checkpoints.md#load_collective.
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
