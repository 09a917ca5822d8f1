#include "rankwise/checkpoint/sharded_tensor.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint {

std::vector<int64_t> TensorChunk::sizes() const { return data.sizes().vec(); }

ShardedTensor::ShardedTensor(std::vector<int64_t> global_shape, c10::ScalarType dtype,
                             std::vector<TensorChunk> chunks)
    : global_shape_(std::move(global_shape)), dtype_(dtype), chunks_(std::move(chunks)) {
  for (int64_t s : global_shape_) {
    RANKWISE_CHECK(s >= 0, ConfigError, "ShardedTensor: global shape [{}] has a negative size",
                   fmt::join(global_shape_, ", "));
  }
  for (std::size_t i = 0; i < chunks_.size(); ++i) {
    const auto& c = chunks_[i];
    RANKWISE_CHECK(c.data.defined() && c.data.device().is_cpu() && c.data.scalar_type() == dtype_ &&
                       c.data.dim() == static_cast<int64_t>(global_shape_.size()) &&
                       c.offsets.size() == global_shape_.size(),
                   ConfigError,
                   "ShardedTensor of shape [{}] and dtype {}: chunk {} must be a CPU tensor of "
                   "that dtype with {} dimensions and as many offsets (it is {}, {} offsets)",
                   fmt::join(global_shape_, ", "), c10::toString(dtype_), i, global_shape_.size(),
                   c.data.defined() ? c.data.toString() + " " +
                                          fmt::format("[{}]", fmt::join(c.data.sizes(), ", "))
                                    : "undefined",
                   c.offsets.size());
    for (std::size_t d = 0; d < global_shape_.size(); ++d) {
      RANKWISE_CHECK(c.offsets[d] >= 0 &&
                         c.offsets[d] + c.data.size(static_cast<int64_t>(d)) <= global_shape_[d],
                     ConfigError,
                     "ShardedTensor of shape [{}]: chunk {} at offsets [{}] with sizes [{}] "
                     "reaches outside the tensor along dimension {}",
                     fmt::join(global_shape_, ", "), i, fmt::join(c.offsets, ", "),
                     fmt::join(c.data.sizes(), ", "), d);
    }
  }
}

int64_t ShardedTensor::global_numel() const {
  int64_t n = 1;
  for (int64_t s : global_shape_) n *= s;
  return n;
}

std::pair<int64_t, int64_t> chunk_range(int64_t length, int rank, int world_size) {
  RANKWISE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size && length >= 0, ConfigError,
                 "chunk_range: rank {} of world size {} over {} items is not valid", rank,
                 world_size, length);
  const int64_t piece = (length + world_size - 1) / world_size;  // torch.chunk: ceil(length / chunks)
  const int64_t begin = std::min(length, piece * rank);
  return {begin, std::min(length, begin + piece)};
}

ShardedTensor shard_rows(const at::Tensor& global, int rank, int world_size) {
  RANKWISE_CHECK(global.defined() && global.dim() >= 1, ConfigError,
                 "shard_rows: the tensor must have at least one dimension");
  const auto [begin, end] = chunk_range(global.size(0), rank, world_size);
  std::vector<int64_t> offsets(static_cast<std::size_t>(global.dim()), 0);
  offsets[0] = begin;
  return ShardedTensor(global.sizes().vec(), global.scalar_type(),
                       {TensorChunk{std::move(offsets), global.narrow(0, begin, end - begin)}});
}

ShardedTensor zeros_sharded_rows(const std::vector<int64_t>& global_shape, c10::ScalarType dtype, int rank,
                                 int world_size) {
  RANKWISE_CHECK(!global_shape.empty(), ConfigError,
                 "zeros_sharded_rows: the shape must have at least one dimension");
  const auto [begin, end] = chunk_range(global_shape[0], rank, world_size);
  std::vector<int64_t> sizes = global_shape;
  sizes[0] = end - begin;
  std::vector<int64_t> offsets(global_shape.size(), 0);
  offsets[0] = begin;
  return ShardedTensor(global_shape, dtype,
                       {TensorChunk{std::move(offsets), at::zeros(sizes, at::TensorOptions().dtype(dtype))}});
}

ShardedTensor shard_flat(const at::Tensor& global, int rank, int world_size) {
  RANKWISE_CHECK(global.defined(), ConfigError, "shard_flat: the tensor is undefined");
  return shard_rows(global.reshape({-1}), rank, world_size);
}

ShardedTensor zeros_sharded_flat(int64_t numel, c10::ScalarType dtype, int rank, int world_size) {
  return zeros_sharded_rows({numel}, dtype, rank, world_size);
}

}  // namespace rankwise::checkpoint
