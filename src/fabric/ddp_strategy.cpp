#include "fabric/ddp_strategy.h"

#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "rankwise/amp/grad_scaler.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/parallel/clip_grad.h"
#include "util/text.h"

namespace rankwise::fabric {

namespace {
// For each of the model's parameters, whether the optimizer holds it; the
// last entry counts the optimizer's tensors that are not the model's. int64 [P + 1].
torch::Tensor held_by(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer) {
  const auto params = model.parameters();
  std::unordered_map<const void*, int64_t> index;
  for (std::size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = static_cast<int64_t>(i);
  std::vector<int64_t> held(params.size() + 1, 0);
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto it = index.find(p.unsafeGetTensorImpl());
      if (it == index.end()) {
        held.back() += 1;
      } else {
        held[static_cast<std::size_t>(it->second)] = 1;
      }
    }
  }
  return torch::tensor(held, torch::kInt64);
}

// "rank 1: 2 of the model's 4 parameters" for a rank's held_by().
std::string holding(int rank, const torch::Tensor& held) {
  const int64_t model_params = held.numel() - 1;
  const int64_t foreign = held[-1].item<int64_t>();
  std::string text = fmt::format("rank {}: {} of the model's {} parameters", rank,
                                 held.narrow(0, 0, model_params).sum().item<int64_t>(), model_params);
  if (foreign > 0) text += fmt::format(" and {} tensor(s) that are not the model's", foreign);
  return text;
}
}  // namespace

void DdpStrategy::set_optimizer(torch::optim::Optimizer& optimizer) {
  const auto all = dist::process_group().all_gather(held_by(module(), optimizer));  // collective
  std::vector<std::string> ranks;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r][-1].item<int64_t>() > 0 || !all[r].equal(all[0])) ranks.push_back(holding(r, all[r]));
  }
  if (!ranks.empty()) {
    if (!all[0][-1].item<int64_t>()) ranks.insert(ranks.begin(), holding(0, all[0]));
    core::raise<ConfigError>(
        core::here(),
        "Fabric::setup under strategy {}: the optimizer must hold the same parameters of the set-up "
        "model on every rank, or the replicas drift apart ({}); build it over model->parameters() "
        "on every rank (a ZeroRedundancyOptimizer's local_optimizer() holds only its rank's "
        "share: use --strategy zero1, FabricOptions::strategy, instead)",
        name(), util::join_strings(ranks, "; "));
  }
  Strategy::set_optimizer(optimizer);
}

bool DdpStrategy::accumulating() const { return model_.accumulating && model_.accumulating(); }

void DdpStrategy::end_pass() {
  if (model_.join) model_.join();  // every rank, after its last batch
}

torch::Tensor DdpStrategy::clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                                          amp::GradScaler* scaler) {
  if (scaler) scaler->unscale_(optimizer());
  // DDP made every rank's gradients the same: each clips alike, locally.
  return parallel::clip_grad_norm(module().parameters(), max_norm, norm_type, error_if_nonfinite);
}

bool DdpStrategy::step(amp::GradScaler* scaler) {
  const bool stepped = step_through(optimizer(), scaler);
  optimizer().zero_grad();
  return stepped;
}

void DdpStrategy::check_replicas() {
  if (model_.check_replicas) model_.check_replicas();
}

}  // namespace rankwise::fabric
