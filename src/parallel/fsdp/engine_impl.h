#pragma once
// The state of one FullyShardedDataParallel (ShardingEngine::Impl): its
// parameters' shards, its units and where each stands in the step. The
// gathering and reducing are in engine.cpp, the checkpoint entries in
// sharded_state.cpp (docs/fsdp.md, "How it works").
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/fsdp/layout.h"
#include "parallel/fsdp/op_observer.h"
#include "rankwise/parallel/fully_sharded.h"

namespace rankwise::parallel::fsdp {

/// Frees a parameter's memory, keeping its storage object (and the views of it).
void free_storage(const at::Tensor& param);

struct Unit {
  enum class State { kSharded, kGathering, kGathered };
  std::string name;                  // "" for the root unit
  std::vector<ParamShard*> params;
  int64_t per_rank = 0;              // elements of one rank's buffer (no tag)
  int trainable = 0;                 // parameters that require a gradient
  State state = State::kSharded;
  c10::intrusive_ptr<c10d::Work> gather;  // in flight while kGathering
  at::Tensor gathered;               // [W * (per_rank + 1)]: each rank's buffer and its tag
  int arrived = 0;                   // gradients accumulated in this backward
  bool reduced = false;              // its reduce-scatter was launched in this backward

  std::string label() const { return name.empty() ? "the root unit" : "unit '" + name + "'"; }
};

struct PendingReduce {
  int unit = 0;
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor input;   // kept alive until the work is done
  at::Tensor output;  // this rank's slice of the sum
};

struct ShardingEngine::Impl final : StorageWatcher {
  enum class Phase { kIdle, kForward, kBackward };

  Impl(std::shared_ptr<torch::nn::Module> module, FullyShardOptions options,
       dist::ProcessGroup& group);
  ~Impl() override;

  // Set-up (engine.cpp).
  void build_units();
  void shard_parameters();
  void add_gradient_hooks();

  // The step.
  void touched(int unit) noexcept override;
  void on_touch(int unit);
  void before_forward();
  void after_forward();
  void forward_failed() noexcept;
  void on_gradient(std::size_t param);
  void finish_backward();
  void reset_step();
  void rethrow_deferred();

  // Gathering and reducing one unit.
  void launch_gather(int unit);
  void finish_gather(int unit);
  void ensure_gathered(int unit);
  void reshard(int unit);
  void prefetch_after(int unit, int direction);
  void launch_ready_reduces();
  void launch_reduce(int unit);
  void apply_reduce(PendingReduce& reduce);
  void drain_reduces(std::size_t keep);
  void note_gathered();
  void record(diag::CollectiveRecord call, const c10::intrusive_ptr<c10d::Work>& work);
  void fill_zeros(int unit);  // after a failure: memory to read, no collective

  c10::ScalarType compute_dtype(const ParamShard& p) const;
  c10::ScalarType reduce_dtype(const ParamShard& p) const;
  std::string where() const;

  std::shared_ptr<torch::nn::Module> module;
  FullyShardOptions options;
  dist::ProcessGroup& group;
  int rank = 0;
  int world = 1;
  std::vector<std::unique_ptr<ParamShard>> params;  // the module's order
  std::vector<int> param_unit;
  std::vector<Unit> units;                           // the root unit last
  // Each parameter's storage at wrapping, held so that its address is never
  // reused by another storage while it is watched (a parameter replaced by
  // to() would otherwise free it).
  std::vector<c10::Storage> storages;

  std::mutex mutex;
  Phase phase = Phase::kIdle;
  int current = -1;                   // the unit whose forward runs
  std::vector<int> order, last_order; // units in the order this / the last forward used them
  std::vector<int> reduce_order;      // this backward's reduce-scatters, in order
  std::size_t next_reduce = 0;
  std::vector<PendingReduce> reduces;
  bool require_sync = true;
  bool final_queued = false;
  std::exception_ptr deferred;        // raised in the observer, rethrown at a safe point

  using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<torch::Tensor>()));
  std::vector<NodePtr> accumulators;
  std::vector<uintptr_t> hook_keys;

  ShardingStats stats;
};

}  // namespace rankwise::parallel::fsdp
