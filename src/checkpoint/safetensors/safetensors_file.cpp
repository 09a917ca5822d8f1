// The safetensors format, written and its header read (safetensors_file.h).
#include "checkpoint/safetensors/safetensors_file.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::safetensors {

const char* dtype_name(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return "F32";
    case c10::ScalarType::Double: return "F64";
    case c10::ScalarType::Half: return "F16";
    case c10::ScalarType::BFloat16: return "BF16";
    case c10::ScalarType::Long: return "I64";
    case c10::ScalarType::Int: return "I32";
    case c10::ScalarType::Short: return "I16";
    case c10::ScalarType::Char: return "I8";
    case c10::ScalarType::Byte: return "U8";
    case c10::ScalarType::Bool: return "BOOL";
    default: return nullptr;
  }
}

std::string file_header(const std::vector<HeaderTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const char* dtype = dtype_name(t.dtype);
    RANKWISE_CHECK(dtype != nullptr, CheckpointError, "safetensors: tensor '{}' is {}, which safetensors cannot hold",
                   t.name, c10::toString(t.dtype));
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

nlohmann::json read_file_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char length[8] = {};
  if (!in.read(reinterpret_cast<char*>(length), 8)) return nullptr;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(length[i]) << (8 * i);
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error || n < 2 || n > size - 8 || n > (uint64_t{100} << 20)) return nullptr;
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n)) || text[0] != '{') return nullptr;
  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return header.is_object() ? header : nlohmann::json(nullptr);
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<HeaderTensor> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)), file_(std::make_unique<io::AtomicFile>(path_)) {
  const std::string header = file_header(tensors_, metadata);
  file_->write(header.data(), header.size());
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& tensor) {
  RANKWISE_CHECK(next_ < tensors_.size() && tensors_[next_].name == name && tensor.scalar_type() == tensors_[next_].dtype &&
                     tensor.sizes().vec() == tensors_[next_].shape && tensor.device().is_cpu(),
                 CheckpointError, "safetensors: '{}': tensor '{}' is not the next one its header announces", path_, name);
  const auto data = tensor.contiguous();
  file_->write(data.data_ptr(), static_cast<std::size_t>(tensors_[next_].bytes));
  ++next_;
}

void SafetensorsWriter::commit() {
  RANKWISE_CHECK(next_ == tensors_.size(), CheckpointError, "safetensors: '{}': {} of {} tensors written", path_, next_,
                 tensors_.size());
  file_->commit();
}

}  // namespace rankwise::checkpoint::safetensors
