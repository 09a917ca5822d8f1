#pragma once
// The reading side of a sharded checkpoint, shared by load_sharded() (every
// byte from this rank's own view) and load_sharded_collective() (bytes of
// data files this rank does not see come from ranks that do): the plan of
// which stored chunks overlap which wanted chunks, the byte ranges that
// needs, and the verified copy.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/sharded/dcp_metadata.h"
#include "checkpoint/sharded/manifest.h"
#include "checkpoint/torch_save/tensor_record.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint::sharded {

/// `.metadata` and `.rankwise-manifest.json` as read from a directory.
struct CheckpointFiles {
  std::string metadata;
  bool has_manifest = false;
  std::string manifest;
};

/// Bytes [offset, offset + size) of data file `file` (relative to the directory).
struct ByteRange {
  std::string file;
  int64_t offset = 0;
  int64_t size = 0;
};

/// The overlap of one stored chunk with one wanted chunk.
struct Piece {
  std::string key;
  const DcpChunk* stored = nullptr;
  TensorChunk want;
};

class ShardedReader {
 public:
  /// `operation` names the caller in errors ("load_sharded").
  /// `keys`: which keys plan() accepts beyond exactly the checkpoint's.
  ShardedReader(std::string dir, std::string operation, ShardedLoadOptions keys = {});
  ~ShardedReader();
  ShardedReader(const ShardedReader&) = delete;
  ShardedReader& operator=(const ShardedReader&) = delete;

  /// Reads `.metadata` (and the manifest where there is one) from this rank's
  /// view of the directory; throws CheckpointError when it is not a checkpoint.
  CheckpointFiles read_files() const;
  /// Parses them (verifying `.metadata` against the manifest's CRC-32).
  void open(const CheckpointFiles& files);
  const DcpMetadata& metadata() const { return metadata_; }
  const std::optional<Manifest>& manifest() const { return manifest_; }

  /// Checks `state` against the checkpoint (keys, as `keys` allows; shapes,
  /// dtypes, coverage) and returns every non-empty overlap of a stored and a
  /// wanted chunk. Keys of `state` the checkpoint lacks (allow_partial_load)
  /// have none; object_ranges() and read_objects() skip them too.
  std::vector<Piece> plan(ShardedState& state) const;
  /// The whole records of the objects (ObjectEntry) of `state`.
  std::vector<ByteRange> object_ranges(const ShardedState& state) const;
  /// Replaces the value of every ObjectEntry of `state` with the stored one,
  /// its record verified against the manifest when there is one.
  void read_objects(ShardedState& state);
  /// The bytes of the records of the pieces' stored chunks that parsing
  /// them reads (header and trailer with a manifest, else the whole record).
  std::vector<ByteRange> record_ranges(const std::vector<Piece>& pieces) const;
  /// The storage bytes `piece` reads (widened to whole checksum blocks).
  ByteRange data_range(const Piece& piece);
  /// Copies `piece` into its wanted chunk, verifying every byte it reads.
  void copy(const Piece& piece);

  /// From now on, reads of files not in `local` are served from `fetched`
  /// (ranges received from other ranks), else fail.
  void serve_from(std::set<std::string> local, std::vector<std::pair<ByteRange, std::string>> fetched);
  /// Reads a range of a data file from this rank's own view.
  std::string read_local(const ByteRange& range);

  [[noreturn]] void fail(const std::string& why) const;

 private:
  struct Overlap {
    std::vector<int64_t> lo, len;
    int64_t count = 0;
  };
  static Overlap overlap(const DcpChunk& c, const TensorChunk& want);
  template <typename Parse>
  void relabelled(const Parse& parse) const;
  int open_file(const std::string& name);
  std::string read_at(const std::string& file, int64_t offset, int64_t size);
  std::string chunk_name(const std::string& key, const DcpChunk& c) const;
  void check_crc(uint32_t expected, const std::string& bytes, const std::string& what, int64_t at) const;
  const ManifestChunk* manifest_chunk(const std::string& key, const DcpChunk& c) const;
  const torch_save::TensorRecord& record(const std::string& key, const DcpChunk& c);

  std::string dir_;
  std::string operation_;
  ShardedLoadOptions keys_;
  std::string label_;
  std::optional<Manifest> manifest_;
  std::map<std::pair<std::string, std::vector<int64_t>>, const ManifestChunk*> manifest_chunks_;
  DcpMetadata metadata_;
  std::map<std::string, int> files_;
  std::map<std::pair<std::string, int64_t>, torch_save::TensorRecord> records_;
  bool remote_ = false;
  std::set<std::string> local_;
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> fetched_;
};

}  // namespace rankwise::checkpoint::sharded
