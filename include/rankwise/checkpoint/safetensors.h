#pragma once
/// \file safetensors.h
/// Export of a rankwise checkpoint (a replicated torch.save file, or a
/// sharded DCP directory) to Hugging Face's safetensors format: one file, or
/// `model-0000i-of-0000N.safetensors` files plus `model.safetensors.index.json`
/// as `transformers` writes them. The story: docs/checkpoint-tool.md.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/arg.h>

namespace rankwise::checkpoint {

/// Strings of a safetensors header's `__metadata__`, by name.
using SafetensorsMetadata = std::map<std::string, std::string>;

/// Options of export_safetensors() (setters and getters as torch::nn options).
struct SafetensorsExportOptions {
  /// Most bytes of tensor data per file; 0 (the default): one file. With a
  /// limit, `dst` is a directory that gets `model-00001-of-0000N.safetensors`
  /// ... and `model.safetensors.index.json`; a tensor larger than the limit
  /// gets a file of its own (as transformers' save_pretrained does).
  TORCH_ARG(int64_t, max_shard_bytes) = 0;
  /// Only keys that start with `prefix`, written without it (e.g. "model."
  /// for the model of a TrainingState checkpoint, giving the plain
  /// `state_dict()` names a model loads). Default "": every tensor.
  TORCH_ARG(std::string, prefix) = "";
  /// Strings stored in the header's `__metadata__` (`{"format": "pt"}` is
  /// always added, as safetensors' save_file(..., metadata) and transformers expect).
  TORCH_ARG(SafetensorsMetadata, metadata) = {};
};

/// What export_safetensors() wrote.
struct SafetensorsExport {
  /// The files written (the index last when there is one).
  std::vector<std::string> files;
  /// The tensors exported, by key, in file order.
  std::vector<std::string> tensors;
  /// Keys of values that are not tensors (ints, strings, ...), not exported:
  /// safetensors holds tensors only.
  std::vector<std::string> skipped;
  /// Bytes of tensor data (the index's `total_size`).
  int64_t total_bytes = 0;
};

/// Writes the tensors of the checkpoint `src` to `dst` in the safetensors
/// format. `src` is a file written by save() (or Python's torch.save of a
/// dict), or a directory written by save_sharded() (or Python's dcp.save).
/// Nested dicts (and lists holding tensors or dicts) are flattened into
/// dotted keys ("model.fc.weight", "optimizer.state.0.exp_avg"), as DCP
/// flattens them. Tensors keep their
/// shape and dtype (float32, float64, float16, bfloat16, int64, int32,
/// int16, int8, uint8, bool: safetensors' F32, F64, F16, BF16, I64, I32, I16,
/// I8, U8, BOOL) and are written contiguous, little-endian.
///
/// A sharded checkpoint is read one tensor at a time, its pieces from every
/// rank's data file, each verified against the manifest's CRC-32s, written
/// and freed: memory peaks at the largest tensor, never the whole state. A
/// replicated file is loaded (and verified) whole first, as load() does.
/// Every file is written with an AtomicFile and published only once every
/// tensor is written (the index last): a failure leaves nothing under the
/// final names.
///
/// Local: any one process, no communication (call it on one rank). Throws
/// CheckpointError when `src` is not a checkpoint or fails its checksums,
/// when a tensor has a dtype safetensors lacks (complex; named), when no
/// tensor matches `prefix`, or when `dst` cannot be written; ConfigError
/// when `max_shard_bytes` is negative.
SafetensorsExport export_safetensors(const std::string& src, const std::string& dst,
                                     SafetensorsExportOptions options = {});

}  // namespace rankwise::checkpoint
