#pragma once
/// \file checkpoint/checkpoint.h
/// Replicated checkpoints: rank 0 writes atomically while the others wait;
/// every rank loads onto the CPU.
///
/// A checkpoint is a c10::Dict<std::string, IValue> serialized with
/// torch::pickle_save, the format of Python's `torch.save` of a dict, so
/// `torch.load(path, map_location="cpu")` in Python reads it.

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace rankwise {

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
/// the other ranks wait at a barrier. Returns on every rank once the file is
/// complete. If rank 0 fails (bad directory, permission, disk full), every
/// rank throws the same CheckpointError and the previous file at `path` is
/// untouched. Without a process group it simply writes the file.
void save(const std::string& path, const Checkpoint& state);

/// Throws CheckpointError when the directory of `path` does not exist or is
/// not writable, so a run can fail at start rather than at its first save.
/// Any rank; no communication.
void check_checkpoint_path(const std::string& path);

/// Reads a checkpoint onto the CPU. Any rank (typically every rank, after the
/// barrier inside save()). Throws CheckpointError naming the file when it is
/// missing, truncated or not a checkpoint.
Checkpoint load(const std::string& path);

}  // namespace rankwise
