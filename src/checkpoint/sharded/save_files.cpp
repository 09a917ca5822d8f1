#include "checkpoint/sharded/save_files.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>
#include "checkpoint/io/atomic_file.h"
#include "checkpoint/sharded/dcp_metadata.h"
#include "checkpoint/torch_save/dtype_names.h"
#include "checkpoint/io/fault_injection.h"
#include "checkpoint/sharded/object_record.h"
#include "checkpoint/sharded/manifest.h"
#include "checkpoint/sharded/storage_claim.h"
#include "checkpoint/torch_save/record_writer.h"
#include "util/host_name.h"
#include "util/text.h"
#include "core/check.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace fs = std::filesystem;

namespace rankwise::checkpoint::sharded {

using nlohmann::json;

// Rank 0: the temporary sibling directory the ranks write into.
std::string make_temp_dir(const std::string& dir) {
  std::string name = dir + ".rankwise-tmp.XXXXXX";
  if (::mkdtemp(name.data()) == nullptr) {
    core::raise<CheckpointError>(
        "save_sharded('{}'): cannot create a temporary directory in '{}': {}. Check that it "
        "exists, is writable and has free space",
        dir, io::directory_of(dir), std::strerror(errno));
  }
  ::chmod(name.c_str(), 0755);
  return name;
}

namespace {

json describe(const std::vector<int64_t>& shape, c10::ScalarType dtype, bool replicated) {
  const auto* names = torch_save::dtype_names(dtype);
  if (names == nullptr) {
    core::raise<CheckpointError>(
        "save_sharded: dtype {} cannot be stored in a DCP checkpoint by rankwise",
        c10::toString(dtype));
  }
  return {{"shape", shape}, {"dtype", names->dtype}, {"replicated", replicated}};
}

// Appends one chunk's torch.save record to `out`, streamed from the chunk's memory; returns its manifest entry.
sharded::ManifestChunk write_chunk(io::AtomicFile& out, const std::string& file, const std::string& key,
                                  const std::vector<int64_t>& offsets, const at::Tensor& data) {
  sharded::ManifestChunk c;
  c.key = key;
  c.offsets = offsets;
  c.sizes = data.sizes().vec();
  c.file = file;
  c.offset = static_cast<int64_t>(out.size());
  torch_save::WrittenRecord record = torch_save::write_tensor_record(
      data, sharded::kChecksumBlockBytes, [&](const char* bytes, std::size_t n) { out.write(bytes, n); });
  c.length = record.length;
  c.data_begin = record.data_begin;
  c.data_size = record.data_size;
  c.header_crc32 = record.header_crc32;
  c.trailer_crc32 = record.trailer_crc32;
  c.block_crc32 = std::move(record.block_crc32);
  return c;
}

// Appends an object's torch.save record to `out` (rank 0); returns its manifest entry: the whole
// record is its "header" (no storage, no blocks).
sharded::ManifestChunk write_object(io::AtomicFile& out, const std::string& file, const std::string& key,
                                   const std::vector<char>& bytes) {
  sharded::ManifestChunk c;
  c.key = key;
  c.file = file;
  c.offset = static_cast<int64_t>(out.size());
  c.length = static_cast<int64_t>(bytes.size());
  c.data_begin = c.length;
  c.header_crc32 = sharded::crc32_of(bytes.data(), bytes.size());
  c.trailer_crc32 = sharded::crc32_of(bytes.data(), 0);
  out.write(bytes.data(), bytes.size());
  return c;
}

// An object's value as an error message shows it: IValue's printing, cut to 60 characters.
std::string shown(const c10::IValue& value) {
  std::ostringstream out;
  out << value;
  std::string text = out.str();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

}  // namespace

// This rank's data file; returns its report for rank 0.
json write_part(const std::string& tmp, int rank, int leader, const ShardedState& state,
                const sharded::PickledObjects& pickled) {
  const std::string file = fmt::format("__{}_0.distcp", rank);
  io::AtomicFile out(tmp + "/" + file);
  json entries = json::object();
  std::vector<sharded::ManifestChunk> chunks;
  for (const auto& [key, entry] : state) {
    if (const auto* sharded = std::get_if<ShardedTensor>(&entry)) {
      entries[key] = describe(sharded->global_shape(), sharded->dtype(), false);
      for (const auto& chunk : sharded->chunks()) {
        if (chunk.data.numel() == 0) continue;
        chunks.push_back(write_chunk(out, file, key, chunk.offsets, chunk.data));
      }
    } else if (const auto* object = std::get_if<ObjectEntry>(&entry)) {
      const auto found = pickled.find(key);
      const std::vector<char> bytes =
          found != pickled.end() ? found->second : sharded::object_record_bytes(object->value, key);
      entries[key] = {{"object", sharded::crc32_of(bytes.data(), bytes.size())}, {"shown", shown(object->value)}};
      if (rank == 0) chunks.push_back(write_object(out, file, key, bytes));
    } else {
      const auto& tensor = std::get<at::Tensor>(entry);
      if (!tensor.defined()) {
        core::raise<CheckpointError>(
            "save_sharded: replicated tensor '{}' is undefined (a default-constructed at::Tensor); "
            "give it a value or leave it out",
            key);
      }
      if (!tensor.device().is_cpu()) {
        core::raise<CheckpointError>(
            "save_sharded: replicated tensor '{}' is on {}; pass a CPU tensor (move it with "
            ".cpu())",
            key, tensor.device().str());
      }
      entries[key] = describe(tensor.sizes().vec(), tensor.scalar_type(), true);
      if (rank == 0 && tensor.numel() > 0) {
        chunks.push_back(write_chunk(out, file, key, std::vector<int64_t>(tensor.sizes().size(), 0), tensor));
      }
    }
  }
  out.commit();
  return {{"ok", true},   {"leader", leader}, {"host", util::host_name()}, {"file", file},
          {"entries", entries}, {"chunks", json::parse(sharded::chunks_to_json(chunks))}};
}

namespace {

// Throws naming the first key where rank `r`'s entries differ from rank 0's.
void check_same_entries(const std::string& dir, const json& zero, const json& other, int r) {
  if (other == zero) return;
  std::string key;
  for (const auto& [k, e] : zero.items()) {
    if (!other.contains(k) || other.at(k) != e) {
      key = k;
      break;
    }
  }
  if (key.empty()) {
    for (const auto& [k, e] : other.items()) {
      if (!zero.contains(k)) {
        key = k;
        break;
      }
    }
  }
  const auto text = [&](const json& entries) {
    if (!entries.contains(key)) return std::string("no such key");
    const json& e = entries.at(key);
    if (e.contains("object")) {
      // The CRC-32 only when the values print alike (a float's last digits, a long value cut short).
      const bool alike = zero.contains(key) && other.contains(key) && zero.at(key).contains("shown") &&
                         other.at(key).contains("shown") && zero.at(key).at("shown") == other.at(key).at("shown");
      const std::string value = "the object " + e.at("shown").get<std::string>();
      return alike ? fmt::format("{} (its pickle has CRC-32 {:08x})", value, e.at("object").get<uint32_t>()) : value;
    }
    return fmt::format("{} [{}]{}", e.at("dtype").get<std::string>(),
                       fmt::join(e.at("shape").get<std::vector<int64_t>>(), ", "),
                       e.at("replicated").get<bool>() ? " replicated" : "");
  };
  core::raise<CheckpointError>(
      "save_sharded('{}'): rank {} and rank 0 differ at '{}': rank 0 has {}, rank {} has {}. Every "
      "rank must pass the same keys with the same global shapes, dtypes and object values",
      dir, r, key, text(zero), r, text(other));
}

}  // namespace

// Throws unless `dir` is absent, an empty directory or a sharded checkpoint.
void check_replaceable(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) &&
      (!fs::is_directory(dir, ec) ||
       (!fs::exists(fs::path(dir) / sharded::kMetadataName, ec) && !fs::is_empty(dir, ec)))) {
    core::raise<CheckpointError>(
        "save_sharded('{}'): the path exists and is not a sharded checkpoint; refusing to replace "
        "it. Choose another directory or remove it",
        dir);
  }
}

// A storage node's leader: puts `tmp` at `dir`. An existing checkpoint there is swapped out
// atomically (renameat2 RENAME_EXCHANGE), then removed.
void publish_directory(const std::string& tmp, const std::string& dir) {
  check_replaceable(dir);
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  io::fault_at("before-publish");
  if (!exists) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      core::raise<CheckpointError>("save_sharded('{}'): renaming '{}' into place failed: {}", dir,
                                   tmp, std::strerror(errno));
    }
  } else {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
      core::raise<CheckpointError>(
          "save_sharded('{}'): exchanging '{}' with the previous checkpoint failed: {} (renameat2 "
          "RENAME_EXCHANGE needs Linux >= 3.15 and a filesystem that has it)",
          dir, tmp, std::strerror(errno));
    }
  }
  io::fsync_directory(io::directory_of(dir));
  if (exists) fs::remove_all(tmp, ec);  // the previous checkpoint, now at the temporary name
}

namespace {

// Every rank's report, parsed; throws unless every rank wrote its file and
// the ranks agree on the entries.
std::vector<json> checked_reports(const std::string& dir, const std::vector<std::string>& reports) {
  const int world = static_cast<int>(reports.size());
  std::vector<json> parts;
  std::vector<std::string> failures;
  for (int r = 0; r < world; ++r) {
    parts.push_back(json::parse(reports[static_cast<std::size_t>(r)]));
    if (!parts.back().at("ok").get<bool>()) failures.push_back(parts.back().at("error").get<std::string>());
  }
  if (!failures.empty()) {
    core::raise<CheckpointError>(
        "save_sharded('{}') failed on {} rank(s): {}. Nothing was published; the previous "
        "checkpoint at this path is untouched",
        dir, failures.size(), fmt::join(failures, "; "));
  }
  const json& entries = parts[0].at("entries");
  for (int r = 1; r < world; ++r) check_same_entries(dir, entries, parts[static_cast<std::size_t>(r)].at("entries"), r);
  return parts;
}

// The manifest's storage nodes: each leader's ranks, files and hosts, in rank order.
sharded::Manifest manifest_of_nodes(const std::vector<json>& parts) {
  sharded::Manifest manifest;
  manifest.world_size = static_cast<int>(parts.size());
  std::map<int, std::size_t> node_of;  // leader -> index in manifest.nodes
  for (std::size_t r = 0; r < parts.size(); ++r) {
    const json& part = parts[r];
    const int leader = part.at("leader").get<int>();
    if (!node_of.count(leader)) {
      node_of[leader] = manifest.nodes.size();
      manifest.nodes.push_back(sharded::ManifestNode{leader, {}, {}, {}});
    }
    sharded::ManifestNode& node = manifest.nodes[node_of[leader]];
    node.ranks.push_back(static_cast<int>(r));
    node.files.push_back(part.at("file").get<std::string>());
    const std::string host = part.at("host").get<std::string>();
    if (std::find(node.hosts.begin(), node.hosts.end(), host) == node.hosts.end()) node.hosts.push_back(host);
  }
  return manifest;
}

// .metadata's entries (rank 0's, which every rank agreed on), then every rank's chunks in
// .metadata and in the manifest.
sharded::DcpMetadata metadata_of(const std::vector<json>& parts, sharded::Manifest& manifest) {
  sharded::DcpMetadata metadata;
  for (const auto& [key, e] : parts[0].at("entries").items()) {
    if (e.contains("object")) {
      metadata.objects[key] = sharded::DcpObject{};
      continue;
    }
    sharded::DcpTensor& t = metadata.tensors[key];
    t.dtype = torch_save::dtype_names(e.at("dtype").get<std::string>(), false)->type;
    t.size = e.at("shape").get<std::vector<int64_t>>();
  }
  for (const auto& part : parts) {
    for (auto& c : sharded::chunks_from_json(part.at("chunks").dump(), "a rank's report")) {
      if (auto object = metadata.objects.find(c.key); object != metadata.objects.end()) {
        object->second = sharded::DcpObject{c.file, c.offset, c.length};
        manifest.chunks.push_back(std::move(c));
        continue;
      }
      sharded::DcpTensor& t = metadata.tensors.at(c.key);
      sharded::DcpChunk chunk;
      chunk.offsets = c.offsets;
      chunk.sizes = c.sizes;
      chunk.relative_path = c.file;
      chunk.offset = c.offset;
      chunk.length = c.length;
      t.chunks.push_back(std::move(chunk));
      manifest.chunks.push_back(std::move(c));
    }
  }
  return metadata;
}

// Throws unless every object has its record and the chunks of each tensor hold its elements.
void check_covered(const std::string& dir, const sharded::DcpMetadata& metadata) {
  for (const auto& [key, object] : metadata.objects) {
    if (object.relative_path.empty()) {
      core::raise<CheckpointError>(
          "save_sharded('{}'): rank 0 reported no record of the object '{}' (a bug in rankwise)",
          dir, key);
    }
  }
  for (const auto& [key, t] : metadata.tensors) {
    int64_t numel = 1, stored = 0;
    for (int64_t s : t.size) numel *= s;
    for (const auto& chunk : t.chunks) {
      int64_t n = 1;
      for (int64_t s : chunk.sizes) n *= s;
      stored += n;
    }
    if (stored != numel) {
      core::raise<CheckpointError>(
          "save_sharded('{}'): the chunks of '{}' on all ranks hold {} elements, the tensor [{}] "
          "has {}: the ranks' chunks must cover it exactly once",
          dir, key, stored, fmt::join(t.size, ", "), numel);
    }
  }
}

}  // namespace

// A storage node's leader: checks every rank's report (every leader reaches
// the same verdict from the same reports), writes .metadata and the manifest
// (the same bytes on every node) into its `tmp` and removes the marker.
void prepare(const std::string& dir, const std::string& tmp, const std::vector<std::string>& reports) {
  const std::vector<json> parts = checked_reports(dir, reports);
  sharded::Manifest manifest = manifest_of_nodes(parts);
  const sharded::DcpMetadata metadata = metadata_of(parts, manifest);
  check_covered(dir, metadata);
  const std::string pickled = sharded::pickle_dcp_metadata(metadata);
  manifest.metadata_crc32 = sharded::crc32_of(pickled.data(), pickled.size());
  io::write_file_atomically(tmp + "/" + sharded::kMetadataName, pickled.data(), pickled.size());
  const std::string text = sharded::manifest_to_json(manifest);
  io::write_file_atomically(tmp + "/" + sharded::kManifestName, text.data(), text.size());
  std::error_code ec;
  fs::remove(fs::path(tmp) / sharded::kStorageMarker, ec);
  io::fsync_directory(tmp);
  check_replaceable(dir);
}

}  // namespace rankwise::checkpoint::sharded
