#pragma once
/// \file clip_grad.h
/// Gradient clipping by the global norm, as PyTorch's
/// torch.nn.utils.clip_grad_norm_. For ZeRO's sharded variant (each rank
/// reads only the gradients it owns) see
/// ZeroRedundancyOptimizer::clip_grad_norm.
///
/// Usage (every rank, after DistributedDataParallel averaged the gradients,
/// so that every rank clips the same gradients by the same factor):
/// \code
///   loss_of(ddp.forward(x)).backward();
///   rankwise::parallel::clip_grad_norm(ddp.parameters(), 1.0);
///   opt.step();
/// \endcode

#include <ATen/core/Tensor.h>

#include <vector>

namespace rankwise::parallel {

/// Scales the gradients of `parameters` in place so that their total norm is
/// at most `max_norm`, and returns that total norm (before clipping) as a
/// 0-dim tensor on the first gradient's device, of the gradients' dtype
/// (float32 for float32 gradients; float32 0 when no parameter has one).
/// The total is the `norm_type`-norm of the per-gradient norms (infinity:
/// the largest absolute value); each gradient is multiplied by
/// min(max_norm / (total + 1e-6), 1), a tensor, so there is no host sync
/// unless `error_if_nonfinite`. Parameters without a gradient are skipped.
/// Local (no communication): call it on each rank with the same gradients.
/// Throws ConfigError when max_norm is negative or nan, or norm_type is not
/// positive (infinity is allowed); with `error_if_nonfinite`, Error when the
/// total norm is inf or nan (nothing is scaled then).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                             double norm_type = 2.0, bool error_if_nonfinite = false);

}  // namespace rankwise::parallel
