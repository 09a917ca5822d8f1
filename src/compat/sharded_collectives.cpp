#include "compat/sharded_collectives.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <vector>

#include "compat/gloo_bfloat16.h"

// 2.15 names them all_gather_single / reduce_scatter_single and deprecates
// the old names, which every 2.x has (the GPU machines run 2.11).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace rankwise::compat {

bool reduce_scatter_is_all_reduce() { return TORCH_VERSION_MAJOR < 2; }

c10::ScalarType reduce_dtype_for(c10::ScalarType dtype, bool on_gloo) {
  return on_gloo && !kGlooCommunicatesBfloat16 && dtype == at::kBFloat16 ? at::kFloat : dtype;
}

c10::intrusive_ptr<c10d::Work> all_gather_flat(c10d::ProcessGroup& group, at::Tensor& output,
                                               at::Tensor& input) {
  if (!kGlooCommunicatesBfloat16 && input.scalar_type() == at::kBFloat16) {
    at::Tensor bits_out = output.view(at::kHalf);
    at::Tensor bits_in = input.view(at::kHalf);
    return all_gather_flat(group, bits_out, bits_in);
  }
#if TORCH_VERSION_MAJOR >= 2
  return group._allgather_base(output, input);
#else
  const int64_t per_rank = input.numel();
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < group.getSize(); ++r) outputs[0].push_back(output.narrow(0, per_rank * r, per_rank));
  std::vector<at::Tensor> inputs{input};
  return group.allgather(outputs, inputs);
#endif
}

std::pair<c10::intrusive_ptr<c10d::Work>, at::Tensor> reduce_scatter_sum(
    c10d::ProcessGroup& group, at::Tensor& input, int rank, int world_size) {
  const int64_t per_rank = input.numel() / world_size;
#if TORCH_VERSION_MAJOR >= 2
  at::Tensor output = at::empty({per_rank}, input.options());
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  return {group._reduce_scatter_base(output, input, opts), output};
#else
  std::vector<at::Tensor> tensors{input};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  return {group.allreduce(tensors, opts), input.narrow(0, per_rank * rank, per_rank)};
#endif
}

}  // namespace rankwise::compat
