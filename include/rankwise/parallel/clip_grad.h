#pragma once
/// \file clip_grad.h
/// Gradient clipping by the global norm, as PyTorch's torch.nn.utils.clip_grad_norm_, after
/// DistributedDataParallel averaged the gradients (every rank clips by the same factor). ZeRO's
/// sharded variant: ZeroRedundancyOptimizer::clip_grad_norm.
/// See docs/ddp-and-zero.md#gradient-clipping-clip_grad_norm.

#include <ATen/core/Tensor.h>

#include <vector>

namespace rankwise::parallel {

/// Scales the gradients of `parameters` in place to a total norm of at most `max_norm` (the
/// `norm_type`-norm of the per-gradient norms; each times min(max_norm / (total + 1e-6), 1),
/// no host sync unless `error_if_nonfinite`) and returns the total before clipping: 0-dim, on
/// the first gradient's device, the gradients' dtype (float32 0 without gradients). Local:
/// call on each rank. Throws ConfigError for a negative or nan max_norm or norm_type <= 0
/// (infinity allowed); with `error_if_nonfinite`, Error for an inf or nan total (none scaled).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                             double norm_type = 2.0, bool error_if_nonfinite = false);

}  // namespace rankwise::parallel
