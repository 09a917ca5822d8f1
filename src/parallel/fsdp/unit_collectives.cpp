// One unit's collectives: its gather (pack the shards, all-gather, check
// the tags, copy the rows into the parameters' storages), its freeing, and
// the reduce-scatter of its gradients into the shards' .grad.
#include <ATen/ATen.h>

#include <fmt/format.h>

#include <algorithm>

#include "compat/sharded_collectives.h"
#include "core/check.h"
#include "dist/collective_wait.h"
#include "parallel/fsdp/engine_impl.h"
#include "rankwise/error.h"

namespace rankwise::parallel::fsdp {
namespace {

// A unit's tag in its gather buffer: exact in bfloat16 and float16.
double unit_tag(int unit) { return static_cast<double>(unit % 200 + 1); }

// A tensor over `param`'s storage with its own version counter, so that
// writing the gathered rows does not look like an in-place change to the
// autograd graphs that saved the parameter.
at::Tensor alias_of(const at::Tensor& param) {
  at::NoGradGuard no_grad;
  at::Tensor alias = at::empty({0}, param.options());
  alias.set_(param.storage(), param.storage_offset(), param.sizes(), param.strides());
  return alias;
}

void allocate_storage(const at::Tensor& param) {
  c10::StorageImpl* storage = param.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(param.numel()) * param.element_size();
  at::Tensor fresh = at::empty({param.numel()}, param.options());
  storage->set_data_ptr_noswap(fresh.storage().unsafeGetStorageImpl()->set_data_ptr(
      at::DataPtr(nullptr, fresh.device())));
  storage->set_nbytes(bytes);
}

}  // namespace

void free_storage(const at::Tensor& param) { param.storage().unsafeGetStorageImpl()->reset(); }

// Into the flight recorder on 1.13; 2.x's works of _allgather_base and
// _reduce_scatter_base have no future to end the record, so there they
// are not recorded (their failures still name the unit).
void ShardingEngine::Impl::record(diag::CollectiveRecord call, const c10::intrusive_ptr<c10d::Work>& work) {
  if (compat::reduce_scatter_is_all_reduce()) group.record_launched(std::move(call), work);
}

void ShardingEngine::Impl::launch_gather(int u) {
  at::NoGradGuard no_grad;
  Unit& unit = units[static_cast<std::size_t>(u)];
  const int64_t per_rank = unit.per_rank + 1;
  const auto options_of = unit.params.front()->shard.options().dtype(compute_dtype(*unit.params.front()));
  at::Tensor input = at::empty({per_rank}, options_of);
  pack_shards(unit.params, input.narrow(0, 0, unit.per_rank));
  input.narrow(0, unit.per_rank, 1).fill_(unit_tag(u));
  unit.gathered = at::empty({per_rank * world}, options_of);
  unit.gather = compat::all_gather_flat(*group.c10d_group(), unit.gathered, input);
  diag::CollectiveRecord call;
  call.operation = "all_gather";
  call.name = "FullyShardedDataParallel: " + unit.label();
  call.dtype = c10::toString(input.scalar_type());
  call.sizes = input.sizes().vec();
  record(std::move(call), unit.gather);
  unit.state = Unit::State::kGathering;
  ++stats.all_gathers;
  note_gathered();
}

void ShardingEngine::Impl::finish_gather(int u) {
  at::NoGradGuard no_grad;
  Unit& unit = units[static_cast<std::size_t>(u)];
  const std::string what = "all_gather of " + unit.label() + " (FullyShardedDataParallel)";
  auto work = unit.gather;
  dist::run_collective(where(), what, group.timeout(), [&] { return work; });
  unit.gather.reset();
  const int64_t per_rank = unit.per_rank + 1;
  const at::Tensor tags = unit.gathered.view({world, per_rank}).select(1, unit.per_rank).to(at::kDouble);
  const double mine = unit_tag(u);
  if (!tags.eq(mine).all().item<bool>()) {
    std::string ranks;
    for (int r = 0; r < world; ++r) {
      const double tag = tags[r].item<double>();
      const int other = static_cast<int>(tag) - 1;
      if (tag != mine) {
        ranks += fmt::format("{}rank {} gathered {}", ranks.empty() ? "" : ", ", r,
                             other >= 0 && other < static_cast<int>(units.size())
                                 ? units[static_cast<std::size_t>(other)].label()
                                 : std::string("no unit of this model (it was in another "
                                               "collective: one outside the forward, or it left "
                                               "the loop)"));
      }
    }
    core::raise<CollectiveMismatchError>(
        core::at(group),
        "FullyShardedDataParallel: this rank gathered {} but {}: the ranks ran different "
        "forward passes (a unit skipped or called in another order on some rank). Every rank "
        "must run the same units in the same order",
        unit.label(), ranks);
  }
  std::vector<at::Tensor> full;
  for (ParamShard* p : unit.params) {
    allocate_storage(p->param);
    full.push_back(alias_of(p->param));
  }
  unpack_gathered(unit.params, unit.gathered, per_rank, world, full);
  unit.gathered = at::Tensor();
  unit.state = Unit::State::kGathered;
}

void ShardingEngine::Impl::ensure_gathered(int u) {
  Unit& unit = units[static_cast<std::size_t>(u)];
  if (unit.state == Unit::State::kGathered) return;
  if (deferred) {
    fill_zeros(u);
    return;
  }
  if (unit.state == Unit::State::kSharded) launch_gather(u);
  finish_gather(u);
}

void ShardingEngine::Impl::reshard(int u) {
  Unit& unit = units[static_cast<std::size_t>(u)];
  if (unit.state == Unit::State::kGathering) {
    try {
      unit.gather->wait(group.timeout());
    } catch (...) {
    }
    unit.gather.reset();
    unit.gathered = at::Tensor();
  }
  if (unit.state != Unit::State::kSharded) {
    for (ParamShard* p : unit.params) free_storage(p->param);
  }
  unit.state = Unit::State::kSharded;
}

void ShardingEngine::Impl::note_gathered() {
  int64_t live = 0;
  int64_t bytes = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].state == Unit::State::kSharded) continue;
    if (u + 1 < units.size()) ++live;  // the root unit is counted apart
    for (const ParamShard* p : units[u].params) {
      bytes += p->param.numel() * static_cast<int64_t>(c10::elementSize(compute_dtype(*p)));
    }
  }
  stats.max_units_gathered = std::max(stats.max_units_gathered, live);
  stats.gathered_bytes_high_water = std::max(stats.gathered_bytes_high_water, bytes);
}

// At most this many reduce-scatters are in flight (the next unit's backward
// overlaps it): each holds its unit's full gradient until it is applied. Two
// cost 64 MiB more per rank on a 1 GiB model for no measurable speed.
constexpr std::size_t kReducesInFlight = 1;

void ShardingEngine::Impl::launch_reduce(int u) {
  drain_reduces(kReducesInFlight - 1);
  Unit& unit = units[static_cast<std::size_t>(u)];
  std::vector<at::Tensor> grads;
  for (ParamShard* p : unit.params) grads.push_back(p->param.grad());
  // Each rank's segment ends with one flag per parameter (1: this rank has
  // its gradient), so that a parameter no rank used keeps no gradient, as
  // DistributedDataParallel leaves it.
  const auto flags = static_cast<int64_t>(unit.params.size());
  const int64_t stride = unit.per_rank + flags;
  const auto dtype = reduce_dtype(*unit.params.front());
  PendingReduce reduce;
  reduce.unit = u;
  reduce.input = at::empty({stride * world}, unit.params.front()->shard.options().dtype(dtype));
  pack_gradients(unit.params, grads, reduce.input, stride, world, 1.0 / world);
  std::vector<double> had(static_cast<std::size_t>(flags));
  for (std::size_t i = 0; i < grads.size(); ++i) had[i] = grads[i].defined() ? 1.0 : 0.0;
  const at::Tensor had_tensor = at::tensor(had, at::TensorOptions().dtype(at::kDouble)).to(reduce.input.options());
  for (int r = 0; r < world; ++r) reduce.input.narrow(0, stride * r + unit.per_rank, flags).copy_(had_tensor);
  for (ParamShard* p : unit.params) p->param.mutable_grad() = at::Tensor();
  grads.clear();  // the full-size gradients are packed: free them before the collective
  auto [work, output] = compat::reduce_scatter_sum(*group.c10d_group(), reduce.input, rank, world);
  reduce.work = work;
  reduce.output = output;
  diag::CollectiveRecord call;
  call.operation = compat::reduce_scatter_is_all_reduce() ? "all_reduce" : "reduce_scatter";
  call.reduce_op = "sum";
  call.name = "FullyShardedDataParallel: gradients of " + unit.label();
  call.dtype = c10::toString(dtype);
  call.sizes = reduce.input.sizes().vec();
  record(std::move(call), work);
  ++stats.reduce_scatters;
  reduces.push_back(std::move(reduce));
  stats.max_reduces_in_flight = std::max(stats.max_reduces_in_flight, static_cast<int64_t>(reduces.size()));
}

// Completes reduce-scatters, oldest first, until `keep` are in flight: each
// holds its unit's full-size gradient buffer until it is applied.
void ShardingEngine::Impl::drain_reduces(std::size_t keep) {
  while (reduces.size() > keep) {
    try {
      apply_reduce(reduces.front());
    } catch (...) {
      reset_step();
      throw;
    }
    reduces.erase(reduces.begin());
  }
}

void ShardingEngine::Impl::apply_reduce(PendingReduce& reduce) {
  Unit& unit = units[static_cast<std::size_t>(reduce.unit)];
  const std::string what = "reduce-scatter of the gradients of " + unit.label() +
                           " (FullyShardedDataParallel)";
  auto work = reduce.work;
  dist::run_collective(where(), what, group.timeout(), [&] { return work; });
  const at::Tensor had = reduce.output.narrow(0, unit.per_rank, static_cast<int64_t>(unit.params.size()))
                             .to(at::kDouble);
  for (std::size_t i = 0; i < unit.params.size(); ++i) {
    ParamShard* p = unit.params[i];
    if (!p->shard.requires_grad() || p->shard.numel() == 0 || had[static_cast<int64_t>(i)].item<double>() == 0) continue;
    const at::Tensor piece =
        reduce.output.narrow(0, p->offset, p->shard.numel()).view(p->shard.sizes()).to(p->shard.scalar_type());
    at::Tensor& grad = p->shard.mutable_grad();
    if (grad.defined()) {
      grad.add_(piece);
    } else {
      grad = piece.clone(at::MemoryFormat::Contiguous);
    }
  }
}

void ShardingEngine::Impl::fill_zeros(int u) {
  Unit& unit = units[static_cast<std::size_t>(u)];
  if (unit.state == Unit::State::kGathered) return;
  for (ParamShard* p : unit.params) {
    allocate_storage(p->param);
    alias_of(p->param).zero_();
  }
  unit.gather.reset();
  unit.state = Unit::State::kGathered;
}

}  // namespace rankwise::parallel::fsdp
