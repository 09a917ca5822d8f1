#include "checkpoint/sharded/dcp_metadata.h"

#include "core/check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint/torch_save/dtype_names.h"
#include "checkpoint/pickle/pickle_value.h"
#include "checkpoint/pickle/pickle_writer.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::sharded {
namespace {

constexpr const char* kModule = "torch.distributed.checkpoint.metadata";
constexpr const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";
constexpr const char* kVersion = "1.0.0";  // filesystem.py's CURRENT_DCP_VERSION in torch 2.15.0

// ---- writing ----

// cls.__new__(cls) with its __dict__ to follow: what pickle writes for a dataclass.
void begin_dataclass(pickle::PickleWriter& w, const char* module, const char* name) {
  w.global(module, name);
  w.empty_tuple();
  w.new_object();
  w.empty_dict();
  w.mark();
}

void end_dataclass(pickle::PickleWriter& w) {
  w.set_items();
  w.build();
}

// torch.Size((values...)): torch.Size.__reduce__.
void write_size(pickle::PickleWriter& w, const std::vector<int64_t>& values) {
  w.global("torch", "Size");
  w.mark();
  w.mark();
  for (int64_t v : values) w.integer(v);
  w.tuple();
  w.tuple();
  w.reduce();
}

// TensorProperties.__getstate__: (dtype, layout, requires_grad, memory format, pin_memory).
void write_properties(pickle::PickleWriter& w, c10::ScalarType dtype) {
  w.global(kModule, "TensorProperties");
  w.empty_tuple();
  w.new_object();
  w.mark();
  w.global("torch", torch_save::dtype_names(dtype)->dtype);
  w.global("torch.serialization", "_get_layout");  // how torch 2.x pickles torch.strided
  w.mark();
  w.string("torch.strided");
  w.tuple();
  w.reduce();
  w.boolean(false);
  w.global("builtins", "getattr");  // an Enum member, as Python 3.11 pickles it
  w.mark();
  w.global(kModule, "_MEM_FORMAT_ENCODING");
  w.string("TORCH_CONTIGUOUS_FORMAT");
  w.tuple();
  w.reduce();
  w.boolean(false);
  w.tuple();
  w.build();
}

// _StorageInfo(relative_path, offset, length): where a record lies.
void write_storage_info(pickle::PickleWriter& w, const std::string& relative_path, int64_t offset, int64_t length) {
  begin_dataclass(w, kFilesystemModule, "_StorageInfo");
  w.string("relative_path");
  w.string(relative_path);
  w.string("offset");
  w.integer(offset);
  w.string("length");
  w.integer(length);
  end_dataclass(w);
}

// ---- reading ----

[[noreturn]] void not_metadata(const std::string& path, const std::string& why) {
  core::raise<CheckpointError>(
      "'{}' is not the .metadata of a torch.distributed.checkpoint directory: {}. Check that the "
      "directory holds a checkpoint DCP or rankwise wrote",
      path, why);
}

bool is_object_of(const pickle::PickleRef& v, const std::string& name) {
  return v && v->kind == pickle::PickleValue::Kind::kObject && v->callable &&
         v->callable->global_name() == name;
}

pickle::PickleRef need(const pickle::PickleRef& object, const std::string& attribute, const std::string& path) {
  auto v = object ? object->attribute(attribute) : nullptr;
  if (!v) not_metadata(path, fmt::format("an entry has no '{}'", attribute));
  return v;
}

std::vector<int64_t> read_size(const pickle::PickleRef& v, const std::string& path) {
  if (!is_object_of(v, "torch.Size") || v->args->items.size() != 1 ||
      v->args->items[0]->kind != pickle::PickleValue::Kind::kTuple) {
    not_metadata(path, "a shape is not a torch.Size");
  }
  std::vector<int64_t> out;
  for (const auto& item : v->args->items[0]->items) {
    if (item->kind != pickle::PickleValue::Kind::kInt || item->integer < 0) not_metadata(path, "a shape holds a non-integer");
    out.push_back(item->integer);
  }
  return out;
}

std::string read_string(const pickle::PickleRef& v, const std::string& path) {
  if (!v || v->kind != pickle::PickleValue::Kind::kString) not_metadata(path, "a name is not a string");
  return v->text;
}

int64_t read_int(const pickle::PickleRef& v, const std::string& path) {
  if (!v || v->kind != pickle::PickleValue::Kind::kInt || v->integer < 0) not_metadata(path, "an offset or length is not an integer");
  return v->integer;
}

c10::ScalarType read_dtype(const pickle::PickleRef& properties, const std::string& key, const std::string& path) {
  // TensorProperties' state: a tuple whose first element is the dtype (torch.<name>).
  pickle::PickleRef dtype;
  if (properties && properties->state && properties->state->kind == pickle::PickleValue::Kind::kTuple &&
      !properties->state->items.empty()) {
    dtype = properties->state->items[0];
  } else if (properties) {
    dtype = properties->attribute("dtype");
  }
  const std::string name = dtype ? dtype->global_name() : "";
  const torch_save::DtypeNames* names = name.rfind("torch.", 0) == 0 ? torch_save::dtype_names(name.substr(6), false) : nullptr;
  if (names == nullptr) {
    core::raise<CheckpointError>(
        "'{}': tensor '{}' has dtype '{}', which rankwise does not read (it reads {})", path, key,
        name, [] {
          std::string all;
          for (const auto& n : torch_save::kDtypeNames)
            all += std::string(all.empty() ? "" : ", ") + n.dtype;
          return all;
        }());
  }
  return names->type;
}

// Metadata.state_dict_metadata: {key: TensorStorageMetadata or BytesStorageMetadata}.
void write_state_dict_metadata(pickle::PickleWriter& w, const DcpMetadata& metadata) {
  w.string("state_dict_metadata");
  w.empty_dict();
  w.mark();
  for (const auto& [key, tensor] : metadata.tensors) {
    w.string(key);
    begin_dataclass(w, kModule, "TensorStorageMetadata");
    w.string("properties");
    write_properties(w, tensor.dtype);
    w.string("size");
    write_size(w, tensor.size);
    w.string("chunks");
    w.empty_list();
    w.mark();
    for (const auto& chunk : tensor.chunks) {
      begin_dataclass(w, kModule, "ChunkStorageMetadata");
      w.string("offsets");
      write_size(w, chunk.offsets);
      w.string("sizes");
      write_size(w, chunk.sizes);
      end_dataclass(w);
    }
    w.appends();
    end_dataclass(w);
  }
  for (const auto& [key, object] : metadata.objects) {
    w.string(key);
    begin_dataclass(w, kModule, "BytesStorageMetadata");
    end_dataclass(w);
  }
  w.set_items();
}

// Metadata.planner_data: {key: (key,)}.
void write_planner_data(pickle::PickleWriter& w, const DcpMetadata& metadata) {
  w.string("planner_data");
  w.empty_dict();
  w.mark();
  const auto planner_entry = [&](const std::string& key) {
    w.string(key);
    w.mark();
    w.string(key);
    w.tuple();
  };
  for (const auto& [key, tensor] : metadata.tensors) planner_entry(key);
  for (const auto& [key, object] : metadata.objects) planner_entry(key);
  w.set_items();
}

// MetadataIndex(fqn, offset, index): a chunk's (offsets and index) or an object's (None, None).
void write_metadata_index(pickle::PickleWriter& w, const std::string& key, const std::vector<int64_t>* offsets,
                          int64_t index) {
  begin_dataclass(w, kModule, "MetadataIndex");
  w.string("fqn");
  w.string(key);
  w.string("index");
  if (offsets) {
    w.integer(index);
  } else {
    w.none();
  }
  w.string("offset");
  if (offsets) {
    write_size(w, *offsets);
  } else {
    w.none();
  }
  end_dataclass(w);
}

// Metadata.storage_data: {MetadataIndex: _StorageInfo}, the tensors' chunks, then the objects.
void write_storage_data(pickle::PickleWriter& w, const DcpMetadata& metadata) {
  w.string("storage_data");
  w.empty_dict();
  w.mark();
  for (const auto& [key, tensor] : metadata.tensors) {
    for (std::size_t i = 0; i < tensor.chunks.size(); ++i) {
      const auto& chunk = tensor.chunks[i];
      write_metadata_index(w, key, &chunk.offsets, static_cast<int64_t>(i));
      write_storage_info(w, chunk.relative_path, chunk.offset, chunk.length);
    }
  }
  for (const auto& [key, object] : metadata.objects) {
    write_metadata_index(w, key, nullptr, 0);
    write_storage_info(w, object.relative_path, object.offset, object.length);
  }
  w.set_items();
}

// A TensorStorageMetadata: dtype, size and chunks (each inside the tensor's shape).
DcpTensor read_tensor(const pickle::PickleRef& entry, const std::string& key, const std::string& path) {
  DcpTensor tensor;
  tensor.dtype = read_dtype(need(entry, "properties", path), key, path);
  tensor.size = read_size(need(entry, "size", path), path);
  auto chunks = need(entry, "chunks", path);
  if (chunks->kind != pickle::PickleValue::Kind::kList) not_metadata(path, fmt::format("chunks of '{}' is not a list", key));
  for (const auto& c : chunks->items) {
    DcpChunk chunk;
    chunk.offsets = read_size(need(c, "offsets", path), path);
    chunk.sizes = read_size(need(c, "sizes", path), path);
    if (chunk.offsets.size() != tensor.size.size() || chunk.sizes.size() != tensor.size.size()) {
      not_metadata(path, fmt::format("a chunk of '{}' has another number of dimensions than the tensor", key));
    }
    for (std::size_t d = 0; d < tensor.size.size(); ++d) {
      if (chunk.offsets[d] + chunk.sizes[d] > tensor.size[d]) {
        not_metadata(path, fmt::format("a chunk of '{}' reaches past the tensor's shape", key));
      }
    }
    tensor.chunks.push_back(std::move(chunk));
  }
  return tensor;
}

// Metadata.state_dict_metadata: the entries, without where they are stored.
DcpMetadata read_entries(const pickle::PickleRef& root, const std::string& path) {
  DcpMetadata out;
  auto entries = need(root, "state_dict_metadata", path);
  if (entries->kind != pickle::PickleValue::Kind::kDict) not_metadata(path, "state_dict_metadata is not a dict");
  for (std::size_t i = 0; i + 1 < entries->items.size(); i += 2) {
    const std::string key = read_string(entries->items[i], path);
    const auto& entry = entries->items[i + 1];
    if (is_object_of(entry, std::string(kModule) + ".BytesStorageMetadata")) {
      out.objects.emplace(key, DcpObject{});
      continue;
    }
    if (!is_object_of(entry, std::string(kModule) + ".TensorStorageMetadata")) {
      not_metadata(path, fmt::format("the entry of '{}' is neither a TensorStorageMetadata nor a BytesStorageMetadata",
                                     key));
    }
    out.tensors.emplace(key, read_tensor(entry, key, path));
  }
  return out;
}

// Metadata.storage_data: where each object and each chunk is stored, into `out`.
void read_storage(const pickle::PickleRef& root, const std::string& path, DcpMetadata& out) {
  auto storage = need(root, "storage_data", path);
  if (storage->kind != pickle::PickleValue::Kind::kDict) not_metadata(path, "storage_data is not a dict");
  for (std::size_t i = 0; i + 1 < storage->items.size(); i += 2) {
    const auto& index = storage->items[i];
    const auto& info = storage->items[i + 1];
    const std::string key = read_string(need(index, "fqn", path), path);
    auto transforms = info ? info->attribute("transform_descriptors") : nullptr;
    if (transforms && transforms->kind == pickle::PickleValue::Kind::kList && !transforms->items.empty()) {
      core::raise<CheckpointError>(
          "'{}': the record of '{}' is stored with transforms (e.g. compression), which rankwise "
          "does not read",
          path, key);
    }
    if (auto object = out.objects.find(key); object != out.objects.end()) {
      object->second.relative_path = read_string(need(info, "relative_path", path), path);
      object->second.offset = read_int(need(info, "offset", path), path);
      object->second.length = read_int(need(info, "length", path), path);
      continue;
    }
    auto it = out.tensors.find(key);
    if (it == out.tensors.end()) not_metadata(path, fmt::format("storage_data names '{}', which has no entry", key));
    auto offset = index->attribute("offset");
    const auto offsets = offset && offset->kind != pickle::PickleValue::Kind::kNone ? read_size(offset, path)
                                                                             : std::vector<int64_t>{};
    for (auto& chunk : it->second.chunks) {
      if (chunk.offsets != offsets) continue;
      chunk.relative_path = read_string(need(info, "relative_path", path), path);
      chunk.offset = read_int(need(info, "offset", path), path);
      chunk.length = read_int(need(info, "length", path), path);
    }
  }
}

// Throws unless every object and every chunk has a storage entry.
void check_stored(const DcpMetadata& metadata, const std::string& path) {
  for (const auto& [key, object] : metadata.objects) {
    if (object.relative_path.empty()) not_metadata(path, fmt::format("the object '{}' has no storage entry", key));
  }
  for (const auto& [key, tensor] : metadata.tensors) {
    for (const auto& chunk : tensor.chunks) {
      if (chunk.relative_path.empty()) {
        not_metadata(path, fmt::format("the chunk of '{}' at offsets [{}] has no storage entry", key,
                                       fmt::join(chunk.offsets, ", ")));
      }
    }
  }
}

}  // namespace

std::string pickle_dcp_metadata(const DcpMetadata& metadata) {
  pickle::PickleWriter w;
  begin_dataclass(w, kModule, "Metadata");
  write_state_dict_metadata(w, metadata);
  write_planner_data(w, metadata);
  write_storage_data(w, metadata);
  w.string("storage_meta");
  w.none();
  w.string("version");
  w.string(kVersion);
  end_dataclass(w);
  return w.finish();
}

DcpMetadata unpickle_dcp_metadata(const std::string& bytes, const std::string& path) {
  auto root = pickle::read_pickle(bytes.data(), bytes.size(), fmt::format("'{}'", path));
  if (!is_object_of(root, std::string(kModule) + ".Metadata")) not_metadata(path, "its pickle is not a Metadata");
  DcpMetadata out = read_entries(root, path);
  read_storage(root, path, out);
  check_stored(out, path);
  return out;
}

}  // namespace rankwise::checkpoint::sharded
