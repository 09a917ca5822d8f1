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

/// Writes the tensors of checkpoint `src` (a save() / torch.save file, or a save_sharded() /
/// dcp.save directory) to `dst` as safetensors, nested keys flattened with dots; shapes and
/// dtypes kept (float/int/bool types; not complex), contiguous little-endian. Memory peaks at
/// the largest tensor; files are published only when all are written. Local: one process.
/// Throws CheckpointError (bad or corrupt `src`, complex dtype, no tensor matches `prefix`,
/// `dst` unwritable), ConfigError for a negative `max_shard_bytes`.
SafetensorsExport export_safetensors(const std::string& src, const std::string& dst,
                                     SafetensorsExportOptions options = {});

}  // namespace rankwise::checkpoint
