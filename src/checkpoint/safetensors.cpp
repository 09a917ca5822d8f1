// export_safetensors(): a checkpoint's tensors, one at a time, into
// safetensors files (checkpoint/safetensors/).
#include "rankwise/checkpoint/safetensors.h"

#include <ATen/core/Tensor.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/safetensors/checkpoint_source.h"
#include "checkpoint/safetensors/safetensors_file.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint {

namespace {

constexpr const char* kOperation = "export_safetensors";

// The tensors of each output file, in order: a new file whenever the next
// tensor would take the current one past `limit` (0: no limit).
std::vector<std::vector<std::size_t>> group_into_files(const std::vector<safetensors::HeaderTensor>& tensors, int64_t limit) {
  std::vector<std::vector<std::size_t>> files(1);
  int64_t bytes = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (limit > 0 && !files.back().empty() && bytes + tensors[i].bytes > limit) {
      files.emplace_back();
      bytes = 0;
    }
    files.back().push_back(i);
    bytes += tensors[i].bytes;
  }
  return files;
}

}  // namespace

SafetensorsExport export_safetensors(const std::string& src, const std::string& dst, SafetensorsExportOptions options) {
  RANKWISE_CHECK(options.max_shard_bytes() >= 0, ConfigError,
                 "{}: max_shard_bytes {} is negative; use 0 for one file, or a size in bytes", kOperation,
                 options.max_shard_bytes());
  safetensors::CheckpointSource source(src, kOperation);
  SafetensorsExport result;
  std::vector<safetensors::HeaderTensor> tensors;
  std::vector<const safetensors::SourceEntry*> entries;
  for (const auto& entry : source.entries()) {
    if (entry.key.rfind(options.prefix(), 0) != 0 || entry.key.size() == options.prefix().size()) continue;
    if (!entry.is_tensor) {
      result.skipped.push_back(entry.key);
      continue;
    }
    const std::string name = entry.key.substr(options.prefix().size());
    RANKWISE_CHECK(safetensors::dtype_name(entry.dtype) != nullptr, CheckpointError,
                   "{}('{}'): tensor '{}' is {}, which safetensors cannot hold; convert it to a real dtype first",
                   kOperation, src, entry.key, c10::toString(entry.dtype));
    tensors.push_back({name, entry.dtype, entry.shape, entry.bytes()});
    entries.push_back(&entry);
    result.total_bytes += entry.bytes();
  }
  RANKWISE_CHECK(!tensors.empty(), CheckpointError,
                 "{}('{}'): no tensor{}; list its keys with `rankwise-ckpt inspect {}`", kOperation, src,
                 options.prefix().empty() ? "" : fmt::format(" has a key starting with '{}'", options.prefix()), src);

  auto metadata = options.metadata();
  metadata["format"] = "pt";
  const auto groups = group_into_files(tensors, options.max_shard_bytes());
  const bool one_file = options.max_shard_bytes() == 0;
  if (!one_file) {
    std::error_code error;
    std::filesystem::create_directories(dst, error);
    RANKWISE_CHECK(!error, CheckpointError, "{}: cannot create the directory '{}': {}; choose a writable place",
                   kOperation, dst, error.message());
  }
  std::vector<std::unique_ptr<safetensors::SafetensorsWriter>> writers;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (std::size_t f = 0; f < groups.size(); ++f) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, groups.size());
    const std::string path = one_file ? dst : (std::filesystem::path(dst) / name).string();
    std::vector<safetensors::HeaderTensor> header;
    for (auto i : groups[f]) header.push_back(tensors[i]);
    writers.push_back(std::make_unique<safetensors::SafetensorsWriter>(path, header, metadata));
    for (auto i : groups[f]) {
      writers.back()->write(tensors[i].name, source.tensor(*entries[i]));  // read, written, freed
      weight_map[tensors[i].name] = name;
      result.tensors.push_back(tensors[i].name);
    }
    result.files.push_back(path);
  }
  for (auto& writer : writers) writer->commit();
  if (!one_file) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", result.total_bytes}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    const std::string path = (std::filesystem::path(dst) / "model.safetensors.index.json").string();
    io::write_file_atomically(path, text.data(), text.size());
    result.files.push_back(path);
  }
  return result;
}

}  // namespace rankwise::checkpoint
