#include "rankwise/parallel/clip_grad.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <cmath>
#include <limits>

#include "core/check.h"
#include "parallel/grad_norm.h"

namespace rankwise::parallel {

namespace grad_norm {

void check_arguments(std::string_view operation, double max_norm, double norm_type) {
  RANKWISE_CHECK(norm_type > 0, ConfigError, core::here(),
                 "{}: norm_type {} is not a norm; give a positive number (2 for the Euclidean "
                 "norm) or infinity for the largest absolute value",
                 operation, norm_type);
  RANKWISE_CHECK(max_norm >= 0, ConfigError, core::here(),
                 "{}: max_norm {} must be a number >= 0 (the largest total norm to keep)",
                 operation, max_norm);
}

std::vector<torch::Tensor> defined_grads(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad().detach());
  }
  return grads;
}

at::TensorOptions total_options(const std::vector<torch::Tensor>& grads, at::Device fallback) {
  if (grads.empty()) return at::TensorOptions().dtype(at::kFloat).device(fallback);
  at::ScalarType dtype = grads.front().scalar_type();
  for (const torch::Tensor& g : grads) dtype = at::promoteTypes(dtype, g.scalar_type());
  return at::TensorOptions().dtype(dtype).device(grads.front().device());
}

torch::Tensor per_grad_norms(const std::vector<torch::Tensor>& grads, double norm_type,
                             const at::TensorOptions& options) {
  if (grads.empty()) return at::empty({0}, options);
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const torch::Tensor& g : grads) norms.push_back(at::linalg_vector_norm(g, norm_type).to(options));
  return at::stack(norms);
}

torch::Tensor part_of_total(const torch::Tensor& norms, double norm_type) {
  if (!std::isinf(norm_type)) return norms.pow(norm_type).sum().reshape({1});
  // The max of no norm is 0 (norms are >= 0). A max all_reduce may drop a
  // nan (Gloo compares), so whether there is one travels beside it.
  const torch::Tensor largest = at::cat({norms, at::zeros({1}, norms.options())}).max();
  return at::stack({largest, largest.isnan().to(norms.scalar_type())});
}

dist::ReduceOp part_reduce_op(double norm_type) {
  return std::isinf(norm_type) ? dist::ReduceOp::kMax : dist::ReduceOp::kSum;
}

torch::Tensor total_of_parts(const torch::Tensor& reduced, double norm_type) {
  if (!std::isinf(norm_type)) return reduced[0].pow(1.0 / norm_type);
  return at::where(reduced[1] > 0,
                   at::full_like(reduced[0], std::numeric_limits<double>::quiet_NaN()), reduced[0]);
}

torch::Tensor clip_by_total(const std::vector<torch::Tensor>& grads, const torch::Tensor& total,
                            double max_norm, double norm_type, bool error_if_nonfinite,
                            std::string_view operation) {
  if (error_if_nonfinite) {
    const double value = total.item<double>();
    RANKWISE_CHECK(std::isfinite(value), Error, core::here(),
                   "{}: the total norm of order {} of the gradients is {}, so they cannot be "
                   "clipped; look for an inf or nan in the loss or the inputs, lower the learning "
                   "rate, or pass error_if_nonfinite=false to scale the gradients by it anyway",
                   operation, norm_type, value);
  }
  torch::NoGradGuard no_grad;
  // As PyTorch: max_norm / (total + 1e-6) (Python's division by a tensor is
  // its reciprocal times the number), clamped at 1, multiplied in even when
  // 1, so that no branch waits for the device.
  const torch::Tensor coef = ((total + 1e-6).reciprocal() * max_norm).clamp_max(1.0);
  for (const torch::Tensor& g : grads) g.mul_(coef.to(g.device()));
  return total;
}

}  // namespace grad_norm

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                             double norm_type, bool error_if_nonfinite) {
  constexpr std::string_view kOperation = "clip_grad_norm";
  grad_norm::check_arguments(kOperation, max_norm, norm_type);
  const std::vector<torch::Tensor> grads = grad_norm::defined_grads(parameters);
  if (grads.empty()) return at::zeros({}, at::kFloat);
  const torch::Tensor norms = grad_norm::per_grad_norms(
      grads, norm_type, grad_norm::total_options(grads, grads.front().device()));
  return grad_norm::clip_by_total(grads, at::linalg_vector_norm(norms, norm_type), max_norm,
                                  norm_type, error_if_nonfinite, kOperation);
}

}  // namespace rankwise::parallel
