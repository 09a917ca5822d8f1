#include "parallel/ddp/gradient_arrivals.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_set>

namespace rankwise::parallel::ddp {

GradientArrivals::GradientArrivals(const std::vector<torch::Tensor>& params, Expect expect)
    : expect_(expect),
      calls_(std::make_shared<std::vector<std::atomic<int64_t>>>(params.size())),
      expected_(params.size(), 1) {
  for (size_t i = 0; i < params.size(); ++i) {
    // The tensor holds its accumulator weakly; holding it here keeps the
    // hook (and the Reducer's, on the same node) alive.
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    hook_keys_.push_back(accumulator->add_post_hook(
        std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [calls = calls_, i](const torch::autograd::variable_list& outputs,
                                const torch::autograd::variable_list& /*inputs*/) {
              ++(*calls)[i];
              return outputs;
            })));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientArrivals::~GradientArrivals() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradientArrivals::start_step(const std::vector<torch::Tensor>& outputs) {
  ++steps_;
  if (expect_ == Expect::kReachable) expect_reachable_from(outputs);
  // static_graph: the first step's calls are what every later step owes.
  if (expect_ == Expect::kFirstStep && steps_ == 2) {
    for (size_t i = 0; i < expected_.size(); ++i) expected_[i] = (*calls_)[i].load();
  }
  for (auto& c : *calls_) c.store(0);
}

std::vector<size_t> GradientArrivals::missing() const {
  std::vector<size_t> missing;
  // static_graph's first step: the Reducer all_reduces everything at its end.
  if (expect_ == Expect::kFirstStep && steps_ < 2) return missing;
  int64_t total = 0;
  for (const auto& c : *calls_) total += c.load();
  if (total == 0) return missing;
  for (size_t i = 0; i < expected_.size(); ++i) {
    if ((*calls_)[i].load() < expected_[i]) missing.push_back(i);
  }
  return missing;
}

// The nodes reachable from the outputs' grad_fns, as c10d's
// Reducer::search_unused_parameters walks them.
void GradientArrivals::expect_reachable_from(const std::vector<torch::Tensor>& outputs) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> queue;
  for (const auto& output : outputs) {
    if (const auto& fn = output.grad_fn()) queue.push_back(fn.get());
  }
  while (!queue.empty()) {
    auto* fn = queue.back();
    queue.pop_back();
    for (const auto& edge : fn->next_edges()) {
      auto* next = edge.function.get();
      if (next != nullptr && seen.insert(next).second) queue.push_back(next);
    }
  }
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    expected_[i] = seen.count(accumulators_[i].get()) != 0 ? 1 : 0;
  }
}

}  // namespace rankwise::parallel::ddp
