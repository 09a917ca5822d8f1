#pragma once
/// \file sharded_tensor.h
/// A tensor spread over the ranks: its global shape and dtype, and this rank's chunks, each a
/// box of the global tensor (offset and size per dimension) with its CPU data, as DCP's
/// ChunkStorageMetadata. What save_sharded() writes and load_sharded() fills
/// (sharded_checkpoint.h).

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace rankwise::checkpoint {

/// One box of a sharded tensor: the global tensor's elements
/// [offsets[d], offsets[d] + data.size(d)) along every dimension d. `data` is
/// a CPU tensor of the sharded tensor's dtype with as many dimensions as the
/// global shape; a size of 0 along any dimension makes an empty chunk.
struct TensorChunk {
  std::vector<int64_t> offsets;
  at::Tensor data;

  /// data.sizes(), as a vector.
  std::vector<int64_t> sizes() const;
};

/// This rank's part of a tensor of `global_shape` and `dtype`. Chunks of
/// different ranks are expected not to overlap and, together, to cover the
/// tensor (save_sharded() checks the count of elements).
class ShardedTensor {
 public:
  /// Throws ConfigError when a chunk's data is not a defined CPU tensor of
  /// `dtype` with as many dimensions as `global_shape`, or when a chunk
  /// reaches outside the global shape (negative offset, offset + size past it).
  ShardedTensor(std::vector<int64_t> global_shape, c10::ScalarType dtype, std::vector<TensorChunk> chunks);

  const std::vector<int64_t>& global_shape() const { return global_shape_; }
  c10::ScalarType dtype() const { return dtype_; }
  /// Its chunks; their data are handles: load_sharded() fills them in place.
  const std::vector<TensorChunk>& chunks() const { return chunks_; }
  /// Elements of the global tensor.
  int64_t global_numel() const;

 private:
  std::vector<int64_t> global_shape_;
  c10::ScalarType dtype_;
  std::vector<TensorChunk> chunks_;
};

/// The half-open range [begin, end) of `length` items (rows) that `rank` of
/// `world_size` owns under torch.chunk's convention, which DTensor's
/// Shard(dim) follows: pieces of ceil(length / world_size) items, the last
/// non-empty one shorter, the ranks after it empty (6 over 4 ranks: 2, 2, 2,
/// 0; 10 over 4: 3, 3, 3, 1). Throws ConfigError when rank is not in
/// [0, world_size) or length < 0. Any rank, no communication.
std::pair<int64_t, int64_t> chunk_range(int64_t length, int rank, int world_size);

/// `global` (CPU, at least one dimension) sharded by rows (dimension 0) with
/// chunk_range(): one chunk, a view of `global`'s rows (no copy; empty for
/// the ranks past the last piece). Local; call it with this rank's rank and
/// world size (rankwise::dist::rank(), rankwise::dist::world_size()).
ShardedTensor shard_rows(const at::Tensor& global, int rank, int world_size);

/// The same chunk as shard_rows() of a tensor of `global_shape`, holding
/// zeros of `dtype`: a target for load_sharded().
ShardedTensor zeros_sharded_rows(const std::vector<int64_t>& global_shape, c10::ScalarType dtype, int rank,
                                 int world_size);

/// `global` (CPU) flattened to one dimension of numel elements and split
/// into equal pieces with chunk_range() (as torch.chunk of the flat tensor).
/// The sharded tensor's global shape is then [numel]; a load must ask for
/// the same flat shape. Copies only when `global` is not contiguous.
ShardedTensor shard_flat(const at::Tensor& global, int rank, int world_size);

/// The same chunk as shard_flat() of a tensor of `numel` elements, holding
/// zeros of `dtype`: a target for load_sharded().
ShardedTensor zeros_sharded_flat(int64_t numel, c10::ScalarType dtype, int rank, int world_size);

}  // namespace rankwise::checkpoint
