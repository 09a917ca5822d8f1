// The Fabric's collectives (Lightning Fabric's all_reduce, all_gather,
// broadcast, barrier) and rank_zero_first: forwards to the process group,
// with the caller's line in errors.
#include <chrono>
#include <exception>
#include <functional>
#include <string>

#include "core/check.h"
#include "fabric/fabric_core.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"
#include "rankwise/fabric.h"

namespace rankwise {

namespace {
// The others wait for the first ranks' blocks. A timeout says that a block
// took too long, not the monitored barrier's guess (a barrier in a branch).
void wait_for_first_ranks(dist::ProcessGroup& group, bool first, bool local,
                          std::chrono::milliseconds timeout) {
  try {
    group.monitored_barrier("rank_zero_first", timeout);
  } catch (const TimeoutError&) {
    if (first) throw;
    core::raise<TimeoutError>(
        core::here(),
        "Fabric::rank_zero_first: {} did not finish its block within {} ms, so this rank stopped "
        "waiting; a block that downloads or prepares data may need longer: pass rank_zero_first "
        "a longer timeout (its third argument) or raise FabricOptions::timeout",
        local ? "a node's local rank 0" : "rank 0", timeout.count());
  }
}
}  // namespace

void Fabric::rank_zero_first(const std::function<void()>& block, bool local,
                             std::chrono::milliseconds timeout) {
  const bool first = (local ? local_rank() : rank()) == 0;
  std::exception_ptr failure;
  if (first) {
    try {
      block();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  auto& group = dist::process_group();
  if (timeout.count() == 0) timeout = core_->options.timeout();
  wait_for_first_ranks(group, first, local, timeout);
  // Every rank learns which first ranks failed, so that no rank goes on alone.
  const auto failed = group.all_gather(torch::tensor({failure ? 1 : 0}, torch::kInt32));
  for (int r = 0; r < static_cast<int>(failed.size()); ++r) {
    if (failed[r].item<int>() == 0) continue;
    if (failure) std::rethrow_exception(failure);
    core::raise<PeerError>(core::here(),
                       "Fabric::rank_zero_first: rank {} failed in its block (its error is the "
                       "root cause), so this rank does not run its own",
                       r);
  }
  if (!first) block();
}

void Fabric::all_reduce(torch::Tensor& tensor, dist::ReduceOp op, std::source_location site) {
  dist::process_group().all_reduce(tensor, op, site);
}

double Fabric::all_reduce(double value, dist::ReduceOp op, std::source_location site) {
  auto tensor = torch::tensor({value}, torch::kFloat64);
  dist::process_group().all_reduce(tensor, op, site);
  return tensor.item<double>();
}

std::vector<torch::Tensor> Fabric::all_gather(const torch::Tensor& tensor,
                                              std::source_location site) {
  return dist::process_group().all_gather(tensor, site);
}

void Fabric::broadcast(torch::Tensor& tensor, int root, std::source_location site) {
  dist::process_group().broadcast(tensor, root, site);
}

void Fabric::barrier(std::source_location site) { dist::process_group().barrier(site); }

void Fabric::monitored_barrier(const std::string& name, std::chrono::milliseconds timeout,
                               bool wait_all_ranks, std::source_location site) {
  dist::process_group().monitored_barrier(name, timeout, wait_all_ranks, site);
}

}  // namespace rankwise
