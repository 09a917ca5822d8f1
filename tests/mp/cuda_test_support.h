#pragma once
// Checks shared by the CUDA multi-process tests (test_cuda_nccl.cpp on one
// rank through NCCL, test_cuda_gloo.cpp on two ranks sharing one GPU through
// Gloo): collectives and DDP on tensors of `device`. Each test skips itself
// when CUDA is not available.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp_test_support.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/dist/process_group.h"

namespace cuda_test {

// all_reduce (sum, avg, max), broadcast and all_gather of tensors on
// `device`, which stay there; then a barrier.
inline void expect_collectives_on(const torch::Device& device) {
  const int rank = rankwise::dist::rank(), world = rankwise::dist::world_size();
  const auto opts = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  auto sum = torch::tensor({rank + 1.0f, 10.0f * (rank + 1)}, opts);
  rankwise::dist::all_reduce(sum);
  const float s = world * (world + 1) / 2.0f;
  EXPECT_EQ(sum.device(), device);
  EXPECT_TRUE(sum.cpu().equal(torch::tensor({s, 10 * s})));
  auto avg = torch::full({3}, 2.0f * (rank + 1), opts);
  rankwise::dist::all_reduce(avg, rankwise::dist::ReduceOp::kAvg);
  EXPECT_TRUE(avg.cpu().equal(torch::full({3}, 2.0f * s / world)));
  auto mx = torch::tensor({static_cast<int64_t>(rank)}, opts.dtype(torch::kInt64));
  rankwise::dist::all_reduce(mx, rankwise::dist::ReduceOp::kMax);
  EXPECT_EQ(mx.item<int64_t>(), world - 1);
  auto b = torch::full({4}, rank == 0 ? 7.0f : -1.0f, opts);
  rankwise::dist::broadcast(b, 0);
  EXPECT_TRUE(b.cpu().equal(torch::full({4}, 7.0f)));
  const auto gathered = rankwise::dist::all_gather(torch::full({2}, static_cast<float>(rank), opts));
  ASSERT_EQ(static_cast<int>(gathered.size()), world);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(gathered[r].device(), device);
    EXPECT_TRUE(gathered[r].cpu().equal(torch::full({2}, static_cast<float>(r))));
  }
  rankwise::dist::barrier();
}

// One DDP step of a Linear on `device`: every rank ends with the gradients of
// the average of every rank's loss, as a local replica computes them.
inline void expect_ddp_step_on(const torch::Device& device) {
  const int rank = rankwise::dist::rank(), world = rankwise::dist::world_size();
  torch::manual_seed(1);
  torch::nn::Linear model(5, 3);
  model->to(device);
  torch::nn::Linear reference(5, 3);
  reference->to(device);
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < model->parameters().size(); ++i) {
      reference->parameters()[i].copy_(model->parameters()[i]);
    }
  }
  rankwise::parallel::DistributedDataParallel ddp(model);
  for (const auto& p : model->parameters()) EXPECT_EQ(p.device(), device);
  auto [x, y] = ddp_test::batch_of(rank);
  torch::mse_loss(ddp.forward(x.to(device)), y.to(device)).backward();
  // DDP divides each rank's gradient by the world size, then sums.
  std::vector<torch::Tensor> expected;
  for (int r = 0; r < world; ++r) {
    reference->zero_grad();
    auto [rx, ry] = ddp_test::batch_of(r);
    torch::mse_loss(reference->forward(rx.to(device)), ry.to(device)).backward();
    for (std::size_t i = 0; i < reference->parameters().size(); ++i) {
      auto part = reference->parameters()[i].grad() / world;
      if (r == 0) expected.push_back(part); else expected[i] += part;
    }
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& grad = model->parameters()[i].grad();
    EXPECT_EQ(grad.device(), device);
    EXPECT_TRUE(grad.cpu().equal(expected[i].cpu())) << "parameter " << i << ": max diff "
        << ddp_test::max_abs_diff(grad.cpu(), expected[i].cpu());
  }
}

}  // namespace cuda_test
