#pragma once
/// A tensor's elements in row-major order, as bytes, in bounded pieces: what
/// `tensor.contiguous()` would hold, without a whole copy.
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace rankwise::checkpoint::torch_save {

/// Receives consecutive pieces of bytes; each pointer is valid only during the call.
using ByteSink = std::function<void(const char* data, std::size_t size)>;

/// Hands the bytes of `tensor` (CPU, any strides) to `sink` in row-major
/// element order, in pieces of at most `max_bytes` (>= the element size). A
/// contiguous tensor's pieces are its own memory (no copy); the other pieces
/// (a lazily conjugated or negated view's too, resolved)
/// are copied into one buffer of at most `max_bytes`, so the memory added is
/// bounded whatever the tensor's size. A tensor without elements hands nothing.
void for_each_byte_piece(const at::Tensor& tensor, int64_t max_bytes, const ByteSink& sink);

}  // namespace rankwise::checkpoint::torch_save
