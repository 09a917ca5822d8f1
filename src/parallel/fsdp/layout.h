#pragma once
// How one parameter is split on dim 0 across the ranks (torch.chunk's rule:
// c = ceil(rows / W) rows per rank, the last ranks fewer or none), and where
// its rows sit in a unit's per-rank flat buffer of the gathers and reductions.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rankwise::parallel::fsdp {

struct ParamShard {
  std::string name;            // the module's name for it, e.g. "blocks.0.fc.weight"
  at::Tensor param;            // the module's tensor: full shape, storage freed between uses
  at::Tensor shard;            // this rank's rows (the optimizer's), its own storage
  std::vector<int64_t> shape;  // the full shape (a 0-dim parameter counts as one row)
  int64_t rows = 1;            // dim 0
  int64_t chunk = 1;           // rows per rank, ceil(rows / W)
  int64_t row_numel = 1;       // elements per row
  int64_t offset = 0;          // of its rows in the unit's per-rank buffer

  int64_t rows_of(int rank) const;  // rows rank `rank` holds (0 when past the end)
  int64_t padded_numel() const { return chunk * row_numel; }
};

/// Fills rows, chunk and row_numel from the full shape for a world of `world_size`.
void lay_out(ParamShard& p, int world_size);

/// Each parameter's offset in the unit's per-rank buffer; returns its length.
int64_t assign_offsets(std::vector<ParamShard*>& params);

/// Copies the shards (cast to `dtype`) into `out` (one rank's buffer, zero padded).
void pack_shards(const std::vector<ParamShard*>& params, at::Tensor out);

/// Copies rank r's rows of each parameter from `gathered` ([W, S] flat) into `full[i]`.
void unpack_gathered(const std::vector<ParamShard*>& params, const at::Tensor& gathered,
                     int64_t per_rank, int world_size, std::vector<at::Tensor>& full);

/// Lays each full gradient's rows out as the reduce-scatter's input ([W, S] flat,
/// zero where a gradient is missing), each scaled by `factor`.
void pack_gradients(const std::vector<ParamShard*>& params, const std::vector<at::Tensor>& grads,
                    at::Tensor input, int64_t per_rank, int world_size, double factor);

}  // namespace rankwise::parallel::fsdp
