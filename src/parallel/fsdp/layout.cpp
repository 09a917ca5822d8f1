#include "parallel/fsdp/layout.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace rankwise::parallel::fsdp {

int64_t ParamShard::rows_of(int rank) const {
  return std::max<int64_t>(0, std::min(chunk, rows - chunk * rank));
}

void lay_out(ParamShard& p, int world_size) {
  p.rows = p.shape.empty() ? 1 : p.shape[0];
  p.chunk = (p.rows + world_size - 1) / world_size;
  int64_t numel = 1;
  for (const int64_t d : p.shape) numel *= d;
  p.row_numel = p.rows == 0 ? 0 : numel / p.rows;
  if (p.shape.size() > 1 && p.rows == 0) {
    p.row_numel = 1;
    for (std::size_t i = 1; i < p.shape.size(); ++i) p.row_numel *= p.shape[i];
  }
}

int64_t assign_offsets(std::vector<ParamShard*>& params) {
  int64_t offset = 0;
  for (ParamShard* p : params) {
    p->offset = offset;
    offset += p->padded_numel();
  }
  return offset;
}

void pack_shards(const std::vector<ParamShard*>& params, at::Tensor out) {
  out.zero_();
  for (const ParamShard* p : params) {
    const int64_t n = p->shard.numel();
    if (n > 0) out.narrow(0, p->offset, n).copy_(p->shard.reshape({-1}));
  }
}

void unpack_gathered(const std::vector<ParamShard*>& params, const at::Tensor& gathered,
                     int64_t per_rank, int world_size, std::vector<at::Tensor>& full) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamShard& p = *params[i];
    at::Tensor rows_view = full[i].reshape({p.rows, p.row_numel});
    for (int r = 0; r < world_size; ++r) {
      const int64_t rows = p.rows_of(r);
      if (rows == 0) continue;
      rows_view.narrow(0, p.chunk * r, rows)
          .copy_(gathered.narrow(0, per_rank * r + p.offset, rows * p.row_numel)
                     .view({rows, p.row_numel}));
    }
  }
}

void pack_gradients(const std::vector<ParamShard*>& params, const std::vector<at::Tensor>& grads,
                    at::Tensor input, int64_t per_rank, int world_size, double factor) {
  input.zero_();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamShard& p = *params[i];
    if (!grads[i].defined()) continue;
    const at::Tensor rows_view = grads[i].reshape({p.rows, p.row_numel});
    for (int r = 0; r < world_size; ++r) {
      const int64_t rows = p.rows_of(r);
      if (rows == 0) continue;
      input.narrow(0, per_rank * r + p.offset, rows * p.row_numel)
          .view({rows, p.row_numel})
          .copy_(rows_view.narrow(0, p.chunk * r, rows));
    }
  }
  if (factor != 1.0) input.mul_(factor);
}

}  // namespace rankwise::parallel::fsdp
