// CheckpointSource: a replicated or sharded checkpoint as a flat list of
// entries whose tensors are read one at a time.
#include "checkpoint/safetensors/checkpoint_source.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/sharded/reader.h"
#include "checkpoint/torch_save/checkpoint_file.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::safetensors {

int64_t SourceEntry::bytes() const {
  if (!is_tensor) return 0;
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n * static_cast<int64_t>(c10::elementSize(dtype));
}

namespace {

std::string key_text(const c10::IValue& key) {
  if (key.isString()) return key.toStringRef();
  if (key.isInt()) return std::to_string(key.toInt());
  std::ostringstream out;
  out << key;
  return out.str();
}

std::string joined(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Whether `value` is or holds a tensor or a dict.
bool holds_structure(const c10::IValue& value) {
  if (value.isTensor() || value.isGenericDict()) return true;
  if (value.isList()) {
    for (const auto& item : value.toListRef()) {
      if (holds_structure(item)) return true;
    }
  }
  if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) {
      if (holds_structure(item)) return true;
    }
  }
  return false;
}

// Every leaf of `value` under `prefix`, in order: dicts flattened into dotted
// keys, as DCP's flatten_state_dict does, and lists (tuples) that hold
// tensors or dicts ("optimizer.param_groups.0.lr"); a list of plain values
// ("betas": (0.9, 0.999)) stays one value, as an ObjectEntry does.
void flatten(const std::string& prefix, const c10::IValue& value, std::vector<std::pair<std::string, c10::IValue>>& out) {
  if (value.isGenericDict() && !value.toGenericDict().empty()) {
    for (const auto& item : value.toGenericDict()) flatten(joined(prefix, key_text(item.key())), item.value(), out);
  } else if (value.isList() && holds_structure(value)) {
    const auto& items = value.toListRef();
    for (std::size_t i = 0; i < items.size(); ++i) flatten(joined(prefix, std::to_string(i)), items[i], out);
  } else if (value.isTuple() && holds_structure(value)) {
    const auto& items = value.toTupleRef().elements();
    for (std::size_t i = 0; i < items.size(); ++i) flatten(joined(prefix, std::to_string(i)), items[i], out);
  } else {
    out.emplace_back(prefix, value);
  }
}

}  // namespace

struct CheckpointSource::Impl {
  std::string path;
  std::vector<SourceEntry> entries;
  // Replicated: the loaded leaves, by key.
  std::map<std::string, c10::IValue> values;
  bool recorded = false;
  // Sharded: the open reader.
  std::unique_ptr<sharded::ShardedReader> reader;
};

CheckpointSource::CheckpointSource(const std::string& path, const std::string& operation)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = io::without_trailing_slash(path);
  struct stat st {};
  if (::stat(impl_->path.c_str(), &st) != 0) {
    core::raise<CheckpointError>("{}('{}'): {}; give the path of a checkpoint file (save()) or directory (save_sharded())",
                                 operation, path, std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    impl_->reader = std::make_unique<sharded::ShardedReader>(impl_->path, operation, ShardedLoadOptions().strict(false));
    impl_->reader->open(impl_->reader->read_files());
    const auto& metadata = impl_->reader->metadata();
    std::map<std::string, SourceEntry> sorted;
    for (const auto& [key, tensor] : metadata.tensors) {
      sorted[key] = SourceEntry{key, true, tensor.dtype, tensor.size, static_cast<int64_t>(tensor.chunks.size())};
    }
    for (const auto& [key, object] : metadata.objects) sorted[key] = SourceEntry{key, false, {}, {}, 0};
    for (auto& [key, entry] : sorted) impl_->entries.push_back(std::move(entry));
    return;
  }
  torch_save::Integrity integrity{};
  const auto checkpoint =
      torch_save::checkpoint_from(torch_save::read_checkpoint_file(impl_->path, &integrity), impl_->path);
  impl_->recorded = integrity == torch_save::Integrity::kVerified;
  std::vector<std::pair<std::string, c10::IValue>> leaves;
  for (const auto& key : checkpoint.keys()) flatten(key, checkpoint.at(key), leaves);
  for (auto& [key, value] : leaves) {
    if (value.isTensor() && value.toTensor().defined()) {
      const auto& t = value.toTensor();
      impl_->entries.push_back(SourceEntry{key, true, t.scalar_type(), t.sizes().vec(), 1});
    } else {
      impl_->entries.push_back(SourceEntry{key, false, {}, {}, 0});
    }
    impl_->values[key] = std::move(value);
  }
}

CheckpointSource::~CheckpointSource() = default;

bool CheckpointSource::sharded() const { return impl_->reader != nullptr; }

const std::vector<SourceEntry>& CheckpointSource::entries() const { return impl_->entries; }

std::vector<std::string> CheckpointSource::files() const {
  if (!sharded()) return {impl_->path};
  std::vector<std::string> files{sharded::kMetadataName};
  if (has_checksums()) files.emplace_back(sharded::kManifestName);
  std::set<std::string> data;
  for (const auto& [key, tensor] : impl_->reader->metadata().tensors) {
    for (const auto& c : tensor.chunks) data.insert(c.relative_path);
  }
  for (const auto& [key, object] : impl_->reader->metadata().objects) data.insert(object.relative_path);
  files.insert(files.end(), data.begin(), data.end());
  return files;
}

bool CheckpointSource::has_checksums() const {
  return sharded() ? impl_->reader->manifest().has_value() : impl_->recorded;
}

at::Tensor CheckpointSource::tensor(const SourceEntry& entry) {
  if (!sharded()) return impl_->values.at(entry.key).toTensor().contiguous();
  ShardedState state;
  state.emplace(entry.key, at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype)));
  for (const auto& piece : impl_->reader->plan(state)) impl_->reader->copy(piece);
  return std::get<at::Tensor>(state.at(entry.key));
}

c10::IValue CheckpointSource::value(const SourceEntry& entry) {
  if (!sharded()) return impl_->values.at(entry.key);
  ShardedState state;
  state.emplace(entry.key, ObjectEntry{});
  impl_->reader->read_objects(state);
  return std::get<ObjectEntry>(state.at(entry.key)).value;
}

std::vector<std::string> CheckpointSource::verify_entries() {
  std::vector<std::string> failures;
  for (const auto& e : impl_->entries) {
    try {
      if (e.is_tensor) {
        tensor(e);
      } else {
        value(e);
      }
    } catch (const CheckpointError& error) {  // named by its key: a missing file's error names none
      failures.push_back(fmt::format("{} '{}': {}", e.is_tensor ? "tensor" : "object", e.key, error.what()));
    }
  }
  return failures;
}

std::string describe_value(const c10::IValue& value) {
  std::ostringstream out;
  if (value.isString()) {
    out << '"' << value.toStringRef() << '"';
  } else {
    out << value;
  }
  std::string text = out.str();
  for (auto& c : text) {
    if (c == '\n') c = ' ';
  }
  constexpr std::size_t kMax = 60;
  return text.size() > kMax ? text.substr(0, kMax - 3) + "..." : text;
}

}  // namespace rankwise::checkpoint::safetensors
