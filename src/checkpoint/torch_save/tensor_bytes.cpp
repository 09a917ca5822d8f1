#include "checkpoint/torch_save/tensor_bytes.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace rankwise::checkpoint::torch_save {
namespace {

// Pieces of `t`: contiguous memory as it is, or runs of whole rows (dim 0)
// that fit `max_bytes` copied into `buffer`, or, when one row is larger, each
// row's own pieces.
void pieces(const at::Tensor& t, int64_t max_bytes, at::Tensor& buffer, const ByteSink& sink) {
  const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
  if (bytes == 0) return;
  if (t.is_contiguous() && !t.is_conj() && !t.is_neg()) {  // a lazily conjugated or negated view is copied, resolved
    const char* data = static_cast<const char*>(t.data_ptr());
    for (int64_t at = 0; at < bytes; at += max_bytes) {
      sink(data + at, static_cast<std::size_t>(std::min(max_bytes, bytes - at)));
    }
    return;
  }
  if (bytes <= max_bytes) {
    if (!buffer.defined()) buffer = at::empty({max_bytes}, at::kByte);
    at::from_blob(buffer.data_ptr(), t.sizes(), t.options()).copy_(t);
    sink(static_cast<const char*>(buffer.data_ptr()), static_cast<std::size_t>(bytes));
    return;
  }
  // Not contiguous, so at least one dimension, and no dimension of size 0.
  const int64_t rows = t.size(0);
  const int64_t row_bytes = bytes / rows;
  if (row_bytes > max_bytes) {
    for (int64_t i = 0; i < rows; ++i) pieces(t.select(0, i), max_bytes, buffer, sink);
    return;
  }
  const int64_t step = max_bytes / row_bytes;
  for (int64_t i = 0; i < rows; i += step) pieces(t.narrow(0, i, std::min(step, rows - i)), max_bytes, buffer, sink);
}

}  // namespace

void for_each_byte_piece(const at::Tensor& tensor, int64_t max_bytes, const ByteSink& sink) {
  const at::Tensor t = tensor.detach();
  const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
  at::Tensor buffer;  // allocated on the first copy, at most max_bytes
  pieces(t, std::min(max_bytes, std::max<int64_t>(bytes, 1)), buffer, sink);
}

}  // namespace rankwise::checkpoint::torch_save
