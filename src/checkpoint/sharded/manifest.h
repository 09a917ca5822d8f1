#pragma once
/// `.rankwise-manifest.json`: the checksums of a sharded checkpoint, beside
/// DCP's `.metadata` (DCP reads only the files `.metadata` names, so it
/// ignores this one). CRC-32s are zlib's crc32 (as Python's zlib.crc32).
///
///   {"format": "rankwise-sharded-checkpoint", "version": 1,
///    "world_size": 4, "block_bytes": 262144, "metadata_crc32": 123,
///    "chunks": [{"key": "a", "offsets": [0], "sizes": [2], "file": "__0_0.distcp",
///                "offset": 0, "length": 1344,          // the record, in the file
///                "data_begin": 704, "data_size": 8,    // its storage, in the record
///                "header_crc32": ..,                   // bytes [0, data_begin) of the record
///                "trailer_crc32": ..,                  // bytes [data_begin + data_size, length)
///                "block_crc32": [..]}],                // each block_bytes of the storage
///    "nodes": [{"leader": 0, "ranks": [0, 1], "hosts": ["a"],  // where the data files are:
///               "files": ["__0_0.distcp", "__1_0.distcp"]}]}  // one entry per storage node
/// "nodes" is absent from manifests written before it existed (one storage
/// node holding every file).
#include <cstdint>
#include <string>
#include <vector>

namespace rankwise::checkpoint::sharded {

constexpr const char* kManifestName = ".rankwise-manifest.json";
constexpr const char* kMetadataName = ".metadata";
/// Bytes of storage each block CRC covers when rankwise saves: a partial
/// read is widened to whole blocks, so a resharding load reads up to one
/// block more at each end of every slice it needs. 256 KiB keeps that within
/// 1.1x of the needed bytes for slices of a few MiB (BENCHMARKS.md, sharded
/// checkpoints; 1 MiB blocks read 1.12x there) for 4 bytes of CRC (about 12
/// of JSON) per 256 KiB. Loads use the manifest's block_bytes, so
/// checkpoints saved with 1 MiB blocks stay readable.
constexpr int64_t kChecksumBlockBytes = int64_t{1} << 18;

/// One stored chunk's place and checksums.
struct ManifestChunk {
  std::string key;
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  std::string file;
  int64_t offset = 0;
  int64_t length = 0;
  int64_t data_begin = 0;
  int64_t data_size = 0;
  uint32_t header_crc32 = 0;
  uint32_t trailer_crc32 = 0;
  std::vector<uint32_t> block_crc32;
};

/// The ranks that wrote into one directory at save time (a node's own disk,
/// or every rank on a shared filesystem), its leader (the rank that created
/// the directory, and published it: rank 0, or on another node whichever of
/// its ranks came first), their host names and the data files it holds
/// (files[i] written by ranks[i]).
struct ManifestNode {
  int leader = 0;
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  std::vector<std::string> files;
};

struct Manifest {
  int world_size = 1;
  int64_t block_bytes = kChecksumBlockBytes;
  uint32_t metadata_crc32 = 0;
  std::vector<ManifestChunk> chunks;
  std::vector<ManifestNode> nodes;  // empty: not recorded
};

/// zlib's CRC-32 of `size` bytes (util/crc32.h: the same values, at memory speed).
uint32_t crc32_of(const char* data, std::size_t size);

/// JSON of a chunk list (what each rank reports to rank 0) and back.
std::string chunks_to_json(const std::vector<ManifestChunk>& chunks);
std::vector<ManifestChunk> chunks_from_json(const std::string& json, const std::string& what);

/// The manifest's text, and back. Throws CheckpointError naming `path` when
/// the text is not such a manifest.
std::string manifest_to_json(const Manifest& manifest);
Manifest manifest_from_json(const std::string& json, const std::string& path);

}  // namespace rankwise::checkpoint::sharded
