#include "rankwise/ddp.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <atomic>

namespace rankwise {
namespace detail {
namespace {

// Broadcasts `tensors` from rank 0 as one flat buffer per dtype.
void broadcast_flat(ProcessGroup& group, const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty() || group.world_size() == 1) return;
  torch::NoGradGuard no_grad;
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& entry : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : entry.second) flat_parts.push_back(t.detach().reshape({-1}));
    auto flat = torch::cat(flat_parts);
    group.broadcast(flat, 0);
    int64_t offset = 0;
    for (auto& t : entry.second) {
      const auto n = t.numel();
      t.detach().copy_(flat.narrow(0, offset, n).view(t.sizes()));
      offset += n;
    }
  }
}

}  // namespace

struct DataParallelEngine::State {
  std::shared_ptr<torch::nn::Module> module;
  DistributedDataParallelOptions options;
  ProcessGroup* group = nullptr;
  std::vector<torch::Tensor> params;  // parameters that require grad
  std::vector<torch::Tensor> buffers;
  bool require_sync = true;
  bool callback_queued = false;

  void finalize() {
    callback_queued = false;
    all_reduce();
  }

  void all_reduce() {
    if (group->world_size() == 1) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    parts.reserve(params.size());
    for (auto& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      parts.push_back(p.grad().reshape({-1}));
    }
    auto flat = torch::cat(parts);
    group->all_reduce(flat, ReduceOp::kSum);
    flat.div_(group->world_size());
    int64_t offset = 0;
    for (auto& p : params) {
      const auto n = p.numel();
      p.mutable_grad().copy_(flat.narrow(0, offset, n).view(p.sizes()));
      offset += n;
    }
  }
};

DataParallelEngine::DataParallelEngine(std::shared_ptr<torch::nn::Module> module,
                                       DistributedDataParallelOptions options,
                                       ProcessGroup& group)
    : state_(std::make_shared<State>()) {
  state_->module = std::move(module);
  state_->options = options;
  state_->group = &group;
  for (auto& p : state_->module->parameters()) {
    if (p.requires_grad()) state_->params.push_back(p);
  }
  state_->buffers = state_->module->buffers();
  // Every rank starts from rank 0's replica.
  auto all = state_->module->parameters();
  all.insert(all.end(), state_->buffers.begin(), state_->buffers.end());
  broadcast_flat(group, all);
  // A hook on every parameter queues one end-of-backward callback per backward
  // pass; the callback runs after every gradient was accumulated.
  std::weak_ptr<State> weak = state_;
  for (auto& p : state_->params) {
    p.register_hook([weak](const torch::Tensor& grad) {
      auto state = weak.lock();
      if (state && state->require_sync && !state->callback_queued) {
        state->callback_queued = true;
        torch::autograd::Engine::get_default_engine().queue_callback([weak] {
          if (auto s = weak.lock()) s->finalize();
        });
      }
      return grad;
    });
  }
}

DataParallelEngine::~DataParallelEngine() = default;

void DataParallelEngine::before_forward() {
  if (state_->options.broadcast_buffers_ && !state_->buffers.empty()) {
    broadcast_flat(*state_->group, state_->buffers);
  }
}

void DataParallelEngine::all_reduce_gradients() { state_->all_reduce(); }
void DataParallelEngine::set_require_sync(bool sync) { state_->require_sync = sync; }
bool DataParallelEngine::require_sync() const { return state_->require_sync; }

}  // namespace detail
}  // namespace rankwise
