#pragma once
// Which parameters c10d's Reducer is still waiting for, from rankwise's own
// count of their gradients, never from the Reducer's error text.
//
// The Reducer raises "Expected to have finished reduction in the prior
// iteration" at the next forward (or join()) when a gradient-synchronizing
// backward left some parameter unmarked. It marks a parameter when a post
// hook on the parameter's gradient accumulator fires; rankwise hooks the
// same accumulators and counts, per parameter, the calls since the step was
// prepared. What the Reducer expects of each parameter per step:
//   kEvery      (default): one call each;
//   kReachable  (find_unused_parameters, not static_graph): one call for a
//               parameter reachable in the autograd graph from the tensors
//               forward() returned (the traversal c10d's
//               Reducer::search_unused_parameters makes), none for the others,
//               which the Reducer marks itself;
//   kFirstStep  (static_graph): as many calls as in the first step, whose
//               parameters without any call the Reducer marks itself later.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace rankwise::parallel::ddp {

class GradientArrivals {
 public:
  enum class Expect { kEvery, kReachable, kFirstStep };

  /// Hooks every parameter in `params` (leaves that require grad).
  GradientArrivals(const std::vector<torch::Tensor>& params, Expect expect);
  /// Removes the hooks.
  ~GradientArrivals();
  GradientArrivals(const GradientArrivals&) = delete;
  GradientArrivals& operator=(const GradientArrivals&) = delete;

  /// Call where the Reducer's prepare_for_backward is called (a training
  /// forward that synchronizes gradients), with the same `outputs` (used by
  /// kReachable): counting starts again for this step.
  void start_step(const std::vector<torch::Tensor>& outputs);

  /// Indices (into `params`) of the parameters that got fewer gradient calls
  /// since start_step() than the Reducer expects. Empty when none got any
  /// (the Reducer has marked nothing then, and waits for nothing).
  std::vector<size_t> missing() const;

 private:
  void expect_reachable_from(const std::vector<torch::Tensor>& outputs);

  Expect expect_;
  int64_t steps_ = 0;
  // How this libtorch holds autograd nodes (std::shared_ptr in 1.x,
  // c10::intrusive_ptr in 2.x).
  using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<torch::Tensor>()));
  std::vector<NodePtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::shared_ptr<std::vector<std::atomic<int64_t>>> calls_;  // shared with the hooks
  std::vector<int64_t> expected_;
};

}  // namespace rankwise::parallel::ddp
