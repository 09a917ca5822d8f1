#pragma once
// Any checkpoint rankwise reads, replicated (a torch.save file) or sharded
// (a DCP directory), seen as one flat list of entries with dotted keys
// (nested dicts, and lists that hold tensors or dicts, flattened as DCP
// flattens them; lists of plain values stay one value), whose tensors are
// read whole one at a time: what export_safetensors() and rankwise-ckpt
// walk. A sharded checkpoint's tensor is assembled from its stored chunks
// (every rank's data file), each byte verified against the manifest.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rankwise::checkpoint::safetensors {

/// One leaf of a checkpoint.
struct SourceEntry {
  std::string key;                ///< dotted: "model.fc.weight", "optimizer.param_groups.0.lr"
  bool is_tensor = true;
  c10::ScalarType dtype = c10::ScalarType::Float;  ///< tensors only
  std::vector<int64_t> shape;     ///< tensors only: the global shape
  int64_t stored_chunks = 1;      ///< tensors: pieces stored (sharded: on all ranks together)
  int64_t bytes() const;          ///< numel * element size (0 for a non-tensor)
};

class CheckpointSource {
 public:
  /// Opens `path`: a directory is a sharded checkpoint, a file a replicated
  /// one (loaded and verified whole). `operation` names the caller in errors.
  /// Throws CheckpointError when `path` is missing or not a checkpoint.
  CheckpointSource(const std::string& path, const std::string& operation);
  ~CheckpointSource();
  CheckpointSource(const CheckpointSource&) = delete;
  CheckpointSource& operator=(const CheckpointSource&) = delete;

  bool sharded() const;
  /// Replicated, sorted by nothing: the file's order; sharded: by key.
  const std::vector<SourceEntry>& entries() const;
  /// The data files (sharded: `.metadata`, the manifest and the .distcp
  /// files, relative to the directory; replicated: the file itself).
  std::vector<std::string> files() const;
  /// Whether CRC-32s are recorded (rankwise wrote it; Python's torch.save and
  /// dcp.save record none).
  bool has_checksums() const;
  /// The whole tensor of `entry` on the CPU, contiguous, verified.
  at::Tensor tensor(const SourceEntry& entry);
  /// The value of a non-tensor `entry`.
  c10::IValue value(const SourceEntry& entry);
  /// Reads every entry, which checks every recorded checksum: a sharded
  /// checkpoint's every chunk record (header, data blocks, trailer) and
  /// object against the manifest (`.metadata` was checked when it was
  /// opened); a replicated file's CRC-32 was checked when it was opened.
  /// Returns, for each entry that fails, "tensor 'KEY': " or "object 'KEY': "
  /// and its CheckpointError message (which names the file), in order;
  /// empty when all pass.
  std::vector<std::string> verify_entries();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A short text of a non-tensor value (ints, floats, strings in full;
/// containers abbreviated), for listings.
std::string describe_value(const c10::IValue& value);

}  // namespace rankwise::checkpoint::safetensors
