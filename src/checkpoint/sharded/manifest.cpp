#include "checkpoint/sharded/manifest.h"

#include "core/check.h"

#include <nlohmann/json.hpp>

#include "util/crc32.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::sharded {
namespace {

constexpr const char* kFormat = "rankwise-sharded-checkpoint";

nlohmann::json to_json(const ManifestChunk& c) {
  return {{"key", c.key},
          {"offsets", c.offsets},
          {"sizes", c.sizes},
          {"file", c.file},
          {"offset", c.offset},
          {"length", c.length},
          {"data_begin", c.data_begin},
          {"data_size", c.data_size},
          {"header_crc32", c.header_crc32},
          {"trailer_crc32", c.trailer_crc32},
          {"block_crc32", c.block_crc32}};
}

ManifestChunk from_json(const nlohmann::json& j) {
  ManifestChunk c;
  c.key = j.at("key").get<std::string>();
  c.offsets = j.at("offsets").get<std::vector<int64_t>>();
  c.sizes = j.at("sizes").get<std::vector<int64_t>>();
  c.file = j.at("file").get<std::string>();
  c.offset = j.at("offset").get<int64_t>();
  c.length = j.at("length").get<int64_t>();
  c.data_begin = j.at("data_begin").get<int64_t>();
  c.data_size = j.at("data_size").get<int64_t>();
  c.header_crc32 = j.at("header_crc32").get<uint32_t>();
  c.trailer_crc32 = j.at("trailer_crc32").get<uint32_t>();
  c.block_crc32 = j.at("block_crc32").get<std::vector<uint32_t>>();
  return c;
}

std::vector<ManifestChunk> list_from_json(const nlohmann::json& j) {
  std::vector<ManifestChunk> out;
  for (const auto& c : j) out.push_back(from_json(c));
  return out;
}

}  // namespace

uint32_t crc32_of(const char* data, std::size_t size) { return util::crc32_update(0, data, size); }

std::string chunks_to_json(const std::vector<ManifestChunk>& chunks) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : chunks) list.push_back(to_json(c));
  return list.dump();
}

std::vector<ManifestChunk> chunks_from_json(const std::string& json, const std::string& what) {
  try {
    return list_from_json(nlohmann::json::parse(json));
  } catch (const nlohmann::json::exception& e) {
    core::raise<CheckpointError>("{} is not a list of chunks: {}", what, e.what());
  }
}

std::string manifest_to_json(const Manifest& manifest) {
  nlohmann::json chunks = nlohmann::json::array();
  for (const auto& c : manifest.chunks) chunks.push_back(to_json(c));
  nlohmann::json j = {{"format", kFormat},
                      {"version", 1},
                      {"world_size", manifest.world_size},
                      {"block_bytes", manifest.block_bytes},
                      {"metadata_crc32", manifest.metadata_crc32},
                      {"chunks", chunks}};
  if (!manifest.nodes.empty()) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : manifest.nodes) {
      nodes.push_back({{"leader", n.leader}, {"ranks", n.ranks}, {"hosts", n.hosts}, {"files", n.files}});
    }
    j["nodes"] = nodes;
  }
  return j.dump(1) + "\n";
}

Manifest manifest_from_json(const std::string& json, const std::string& path) {
  try {
    const auto j = nlohmann::json::parse(json);
    if (j.at("format").get<std::string>() != kFormat || j.at("version").get<int>() != 1) {
      core::raise<CheckpointError>(
          "'{}' is a manifest of another format or version ({}, version {}); this rankwise reads "
          "version 1",
          path, j.at("format").dump(), j.at("version").dump());
    }
    Manifest m;
    m.world_size = j.at("world_size").get<int>();
    m.block_bytes = j.at("block_bytes").get<int64_t>();
    m.metadata_crc32 = j.at("metadata_crc32").get<uint32_t>();
    m.chunks = list_from_json(j.at("chunks"));
    if (j.contains("nodes")) {
      for (const auto& n : j.at("nodes")) {
        m.nodes.push_back(ManifestNode{n.at("leader").get<int>(), n.at("ranks").get<std::vector<int>>(),
                                       n.at("hosts").get<std::vector<std::string>>(),
                                       n.at("files").get<std::vector<std::string>>()});
      }
    }
    if (m.block_bytes <= 0) core::raise<CheckpointError>("'{}' has a block size <= 0", path);
    return m;
  } catch (const nlohmann::json::exception& e) {
    core::raise<CheckpointError>(
        "'{}' is damaged or not a rankwise manifest, so nothing in its checkpoint can be verified; "
        "load an earlier checkpoint (the JSON reader says: {})",
        path, std::string(e.what()));
  }
}

}  // namespace rankwise::checkpoint::sharded
