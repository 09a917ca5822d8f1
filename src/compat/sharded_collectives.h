#pragma once
// The two collectives of fully sharded training, as this libtorch has them:
//   2.x:  c10d's _allgather_base and _reduce_scatter_base (Gloo has both);
//   1.13: Gloo has neither: the list allgather into views of one buffer, and
//         a reduce-scatter as an all_reduce of the whole buffer, of which
//         each rank keeps its slice (twice a reduce-scatter's traffic).
// Used only by src/parallel/fsdp/.
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace rankwise::compat {

/// Whether reduce_scatter_sum falls back to an all_reduce (libtorch 1.x).
bool reduce_scatter_is_all_reduce();

/// The dtype gradients are summed in for a requested `dtype`: float32 for
/// bfloat16 where Gloo cannot sum bfloat16 (1.13).
c10::ScalarType reduce_dtype_for(c10::ScalarType dtype, bool on_gloo);

/// Starts gathering every rank's `input` ([S]) into `output` ([W * S]);
/// bfloat16 travels as its bits (viewed as float16) where Gloo refuses it.
c10::intrusive_ptr<c10d::Work> all_gather_flat(c10d::ProcessGroup& group, at::Tensor& output,
                                               at::Tensor& input);

/// Starts summing `input` ([W * S]) over the ranks; once the work is done,
/// the returned tensor ([S]) holds this rank's slice of the sum.
std::pair<c10::intrusive_ptr<c10d::Work>, at::Tensor> reduce_scatter_sum(
    c10d::ProcessGroup& group, at::Tensor& input, int rank, int world_size);

}  // namespace rankwise::compat
