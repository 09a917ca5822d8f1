#pragma once
// The norm math of gradient clipping, shared by parallel::clip_grad_norm
// (every gradient on this rank) and ZeroRedundancyOptimizer::clip_grad_norm
// (this rank's share, combined by one all_reduce). Defined in clip_grad.cpp.
#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <string_view>
#include <vector>

#include "rankwise/dist/process_group.h"

namespace rankwise::parallel::grad_norm {

/// Throws ConfigError naming the value unless max_norm >= 0 and norm_type > 0
/// (infinity allowed). `operation` starts the message.
void check_arguments(std::string_view operation, double max_norm, double norm_type);

/// The defined gradients of `parameters`, detached (they share storage).
std::vector<torch::Tensor> defined_grads(const std::vector<torch::Tensor>& parameters);

/// Where the total norm lives: the first gradient's device and the dtype
/// all gradients promote to; `fallback` and float32 when there is none.
at::TensorOptions total_options(const std::vector<torch::Tensor>& grads, at::Device fallback);

/// Each gradient's norm_type-norm (in its own dtype), as a 1-d tensor of
/// `options` (empty when `grads` is).
torch::Tensor per_grad_norms(const std::vector<torch::Tensor>& grads, double norm_type,
                             const at::TensorOptions& options);

/// This rank's part of a total norm whose gradients are spread over the
/// ranks, from its per_grad_norms(): the sum of norm^p, or for the inf norm
/// {the largest, 1 if one is nan}; combine the ranks' parts with
/// part_reduce_op()'s all_reduce, then total_of_parts().
torch::Tensor part_of_total(const torch::Tensor& norms, double norm_type);
dist::ReduceOp part_reduce_op(double norm_type);
torch::Tensor total_of_parts(const torch::Tensor& reduced, double norm_type);

/// With `error_if_nonfinite`, throws Error when `total` is inf or nan;
/// else multiplies every gradient by min(max_norm / (total + 1e-6), 1) (a
/// tensor: no host sync). Returns `total`.
torch::Tensor clip_by_total(const std::vector<torch::Tensor>& grads, const torch::Tensor& total,
                            double max_norm, double norm_type, bool error_if_nonfinite,
                            std::string_view operation);

}  // namespace rankwise::parallel::grad_norm
