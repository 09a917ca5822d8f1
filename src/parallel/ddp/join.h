#pragma once
// DistributedDataParallel's side of uneven inputs, as PyTorch's Join
// (torch.distributed.algorithms.join) and DDP's _DDPJoinHook do it: each
// training forward launches an all_reduce of a 1 ("I still have inputs")
// without waiting for it, so it runs beside the forward and backward passes;
// a rank in join() answers with a 0 and shadows the step's gradient
// all_reduces. The sum is read at the next training forward (or in join()).
// Which ranks joined is kept in the store, to name them in errors.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rankwise/parallel/ddp.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::parallel::ddp {

class DdpJoin {
 public:
  /// Collective (every rank, in the order the DDP instances are built): the
  /// store keys of this instance are unique per instance.
  DdpJoin(dist::ProcessGroup& group, UnevenInputs mode);

  /// A training forward, before it runs: waits for the previous step's count
  /// (kError: throws Error naming the ranks that ran out), then launches this
  /// step's. `iterations`: the training forwards so far (for the message).
  void start_training_step(int64_t iterations);
  /// Waits for the count launched by the last training forward; with kError,
  /// a rank that ran out makes this one raise, naming it.
  void check_inputs_count(int64_t iterations);
  /// join() of a rank that ran out of inputs: marks it joined and, until no
  /// rank trains, calls `shadow_step` once per step the others still run
  /// (kError: throws Error instead). Collective. The per-step counts are in
  /// the flight recorder ("DistributedDataParallel step 10: ranks with
  /// inputs"), the same on every rank; the Reducer's buckets and their
  /// shadows are not.
  void join(int64_t iterations, const std::function<void()>& shadow_step);
  /// After join() on every rank: the rank whose replica every rank takes
  /// (the one with the most iterations, the lowest on a tie), or nullopt
  /// when every rank ran as many. Collective (one all_gather).
  std::optional<int> most_advanced_rank(int64_t iterations);

 private:
  c10::intrusive_ptr<c10d::Work> launch_count(torch::Tensor count, std::string what);
  void wait_for(c10d::Work& work, const std::string& what);  // throws PeerError
  int64_t last_inputs_count();
  int64_t joined_inputs_count(int64_t iterations);
  std::vector<int> joined_ranks();
  [[noreturn]] void throw_uneven(const std::vector<int>& joined, int64_t iterations);

  dist::ProcessGroup* group_;
  UnevenInputs mode_;
  std::string key_prefix_;
  c10::intrusive_ptr<c10d::Work> inputs_work_;  // the last step's count, in flight
  torch::Tensor inputs_count_;
};

}  // namespace rankwise::parallel::ddp
