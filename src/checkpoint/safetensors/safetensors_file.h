#pragma once
// The safetensors format (huggingface/safetensors, docs/safetensors format):
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][tensor data]
//
// The header maps each tensor's name to {"dtype": "F32", "shape": [...],
// "data_offsets": [begin, end]} (bytes of the data section, contiguous and
// in order, no holes), and "__metadata__" to a map of strings; it is padded
// with spaces so that the data starts at a multiple of 8. The data is each
// tensor's elements, row-major, little-endian.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/io/atomic_file.h"

namespace rankwise::checkpoint::safetensors {

/// safetensors' name of `type` ("F32", "BF16", ...), or null where it has none (complex).
const char* dtype_name(c10::ScalarType type);

/// One tensor of a file, as its header describes it.
struct HeaderTensor {
  std::string name;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};

/// The bytes before the data: the length, the JSON header, the padding.
/// The tensors' data follows in the order of `tensors`.
std::string file_header(const std::vector<HeaderTensor>& tensors, const std::map<std::string, std::string>& metadata);

/// The JSON header of the safetensors file at `path` (what file_header()
/// wrote), or null when `path` is not one. Local; reads only the header.
nlohmann::json read_file_header(const std::string& path);

/// One safetensors file being written: its header at construction, then
/// each tensor's data in order; nothing appears under `path` before commit().
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<HeaderTensor> tensors, const std::map<std::string, std::string>& metadata);
  /// Appends the next tensor's data (a CPU tensor of the header's dtype and
  /// shape). Throws CheckpointError when it is not that tensor.
  void write(const std::string& name, const at::Tensor& tensor);
  /// Publishes the file; throws CheckpointError unless every tensor was written.
  void commit();

 private:
  std::string path_;
  std::vector<HeaderTensor> tensors_;
  std::size_t next_ = 0;
  std::unique_ptr<io::AtomicFile> file_;
};

}  // namespace rankwise::checkpoint::safetensors
