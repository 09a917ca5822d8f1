// The fully sharded engine: wrapping, the step's gathers and reduce-scatters
// (docs/fsdp.md, "How it works").
#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "compat/sharded_collectives.h"
#include "core/check.h"
#include "dist/collective_wait.h"
#include "parallel/fsdp/engine_impl.h"
#include "parallel/fsdp/unit_policy.h"
#include "rankwise/error.h"
#include "util/io.h"

namespace rankwise::parallel::fsdp {
ShardingEngine::Impl::Impl(std::shared_ptr<torch::nn::Module> m, FullyShardOptions o,
                           dist::ProcessGroup& g)
    : module(std::move(m)), options(std::move(o)), group(g), rank(g.rank()), world(g.world_size()) {
  RANKWISE_CHECK(observer_works(), ConfigError, core::at(group),
                 "FullyShardedDataParallel needs libtorch's RecordFunction observers, which this "
                 "libtorch does not run (built with PYTORCH_DISABLE_PER_OP_PROFILING?); use "
                 "DistributedDataParallel or ZeroRedundancyOptimizer");
  build_units();
  shard_parameters();
  add_gradient_hooks();
  for (std::size_t i = 0; i < params.size(); ++i) {
    storages.push_back(params[i]->param.storage());
    watch(storages.back().unsafeGetStorageImpl(), this, param_unit[i]);
  }
}

ShardingEngine::Impl::~Impl() {
  unwatch_all(this);
  for (std::size_t i = 0; i < accumulators.size(); ++i) accumulators[i]->del_post_hook(hook_keys[i]);
  for (auto& reduce : reduces) {
    try {
      reduce.work->wait();
    } catch (...) {  // a destructor does not throw; the failure was or will be reported
    }
  }
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].gather) {
      try {
        units[u].gather->wait();
      } catch (...) {
      }
    }
  }
}

std::string ShardingEngine::Impl::where() const { return core::where(core::at(group)); }

c10::ScalarType ShardingEngine::Impl::compute_dtype(const ParamShard& p) const {
  return options.mixed_precision().param_dtype().value_or(p.shard.scalar_type());
}

c10::ScalarType ShardingEngine::Impl::reduce_dtype(const ParamShard& p) const {
  const bool on_gloo = !p.shard.is_cuda() || group.backend() == "gloo";
  return compat::reduce_dtype_for(
      options.mixed_precision().reduce_dtype().value_or(compute_dtype(p)), on_gloo);
}

void ShardingEngine::Impl::build_units() {
  const std::vector<UnitSpec> specs = find_units(*module, options.units());
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& p : module->named_parameters(/*recurse=*/true)) by_name.emplace(p.key(), p.value());
  units.resize(specs.size());
  for (std::size_t u = 0; u < specs.size(); ++u) {
    units[u].name = specs[u].name;
    for (const std::string& name : specs[u].parameters) {
      auto p = std::make_unique<ParamShard>();
      p->name = name;
      p->param = by_name.at(name);
      RANKWISE_CHECK(p->param.dim() > 0, ConfigError, core::at(group),
                     "FullyShardedDataParallel: parameter '{}' has no dimension to shard (a 0-dim "
                     "tensor); register it with shape [1]",
                     name);
      RANKWISE_CHECK(p->param.is_contiguous(), ConfigError, core::at(group),
                     "FullyShardedDataParallel: parameter '{}' is not contiguous; make it "
                     "contiguous before wrapping",
                     name);
      p->shape = p->param.sizes().vec();
      lay_out(*p, world);
      units[u].params.push_back(p.get());
      units[u].trainable += p->param.requires_grad() ? 1 : 0;
      params.push_back(std::move(p));
      param_unit.push_back(static_cast<int>(u));
    }
    units[u].per_rank = assign_offsets(units[u].params);
  }
  stats.units = static_cast<int64_t>(units.size());
  // params in the module's order (parameters() and the optimizer's state keys)
  std::map<std::string, std::size_t> position;
  std::size_t i = 0;
  for (const auto& p : module->named_parameters(/*recurse=*/true)) position.emplace(p.key(), i++);
  std::vector<std::size_t> index(params.size());
  for (std::size_t k = 0; k < params.size(); ++k) index[k] = k;
  std::sort(index.begin(), index.end(), [&](std::size_t a, std::size_t b) {
    return position.at(params[a]->name) < position.at(params[b]->name);
  });
  std::vector<std::unique_ptr<ParamShard>> sorted;
  std::vector<int> sorted_unit;
  for (const std::size_t k : index) {
    sorted.push_back(std::move(params[k]));
    sorted_unit.push_back(param_unit[k]);
  }
  params = std::move(sorted);
  param_unit = std::move(sorted_unit);
}

void ShardingEngine::Impl::shard_parameters() {
  at::NoGradGuard no_grad;
  for (auto& p : params) {  // rank 0's weights everywhere, as DistributedDataParallel
    at::Tensor full = p->param.detach();
    group.broadcast(full, 0);
    const int64_t rows = p->rows_of(rank);
    p->shard = full.narrow(0, std::min(p->chunk * rank, p->rows), rows).clone();
    p->shard.set_requires_grad(p->param.requires_grad());
    free_storage(p->param);
    if (const auto dtype = options.mixed_precision().param_dtype()) {
      p->param.unsafeGetTensorImpl()->set_storage_and_dtype(
          p->param.storage(), caffe2::TypeMeta::fromScalarType(*dtype));
    }
  }
  for (auto& buffer : module->buffers(/*recurse=*/true)) {
    at::Tensor b = buffer.detach();
    group.broadcast(b, 0);
  }
}

void ShardingEngine::Impl::add_gradient_hooks() {
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i]->param.requires_grad()) continue;
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]->param);
    hook_keys.push_back(accumulator->add_post_hook(
        std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, i](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list& /*inputs*/) {
              on_gradient(i);
              return outputs;
            })));
    accumulators.push_back(std::move(accumulator));
  }
}

// --- The step -----------------------------------------------------------

void ShardingEngine::Impl::touched(int unit) noexcept {
  if (units[static_cast<std::size_t>(unit)].state == Unit::State::kGathered && unit == current) return;
  std::lock_guard lock(mutex);
  Unobserved quiet;
  at::NoGradGuard no_grad;  // the engine's copies are not the model's computation
  try {
    if (deferred) {
      ensure_gathered(unit);  // the error is known: zeros, without collectives, until rethrown
      return;
    }
    on_touch(unit);
  } catch (...) {
    if (!deferred) deferred = std::current_exception();
    fill_zeros(unit);  // so that the operator reads memory, not null
  }
}

void ShardingEngine::Impl::on_touch(int unit) {
  if (phase == Phase::kForward && unit != current) {
    const bool free_previous = current >= 0 && current != static_cast<int>(units.size()) - 1 &&
                               options.reshard_after_forward();
    if (free_previous) reshard(current);
    current = unit;
    if (std::find(order.begin(), order.end(), unit) == order.end()) order.push_back(unit);
  }
  ensure_gathered(unit);
  if (phase == Phase::kForward) prefetch_after(unit, +1);
  if (phase == Phase::kBackward) prefetch_after(unit, -1);
}

// The unit used after (direction +1) or before (-1) `unit` in the last
// forward's order starts gathering, so that its gather overlaps this compute.
void ShardingEngine::Impl::prefetch_after(int unit, int direction) {
  if (!options.prefetch() || world == 1) return;
  const std::vector<int>& seen = direction > 0 ? last_order : order;
  const auto it = std::find(seen.begin(), seen.end(), unit);
  if (it == seen.end()) return;
  const auto pos = static_cast<std::ptrdiff_t>(it - seen.begin()) + direction;
  if (pos < 0 || pos >= static_cast<std::ptrdiff_t>(seen.size())) return;
  const int next = seen[static_cast<std::size_t>(pos)];
  if (direction < 0 && units[static_cast<std::size_t>(next)].reduced) return;
  if (units[static_cast<std::size_t>(next)].state == Unit::State::kSharded) launch_gather(next);
}

void ShardingEngine::Impl::rethrow_deferred() {
  if (!deferred) return;
  std::exception_ptr e = deferred;
  deferred = nullptr;
  reset_step();
  std::rethrow_exception(e);
}

void ShardingEngine::Impl::reset_step() {
  for (std::size_t u = 0; u < units.size(); ++u) reshard(static_cast<int>(u));
  for (auto& reduce : reduces) {
    try {
      reduce.work->wait();
    } catch (...) {
    }
  }
  reduces.clear();
  for (auto& unit : units) {
    unit.arrived = 0;
    unit.reduced = false;
  }
  for (auto& p : params) p->param.mutable_grad() = at::Tensor();
  phase = Phase::kIdle;
  current = -1;
  next_reduce = 0;
  final_queued = false;
}

void ShardingEngine::Impl::before_forward() {
  std::lock_guard lock(mutex);
  Unobserved quiet;
  at::NoGradGuard no_grad;
  rethrow_deferred();
  for (std::size_t i = 0; i < params.size(); ++i) {
    RANKWISE_CHECK(params[i]->param.storage().unsafeGetStorageImpl() == storages[i].unsafeGetStorageImpl(),
                   ConfigError,
                   core::at(group),
                   "FullyShardedDataParallel: parameter '{}' was replaced after wrapping (the "
                   "module was moved with to() or its parameters were reassigned); move the model "
                   "to its device before wrapping it (fabric.setup_module does) and change "
                   "parameters through parameters()' shards",
                   params[i]->name);
  }
  const bool no_sync_leftovers = phase == Phase::kBackward && !final_queued && !require_sync;
  if (phase != Phase::kIdle || no_sync_leftovers) {
    for (std::size_t u = 0; u < units.size(); ++u) reshard(static_cast<int>(u));
  }
  for (auto& unit : units) {
    unit.arrived = 0;
    unit.reduced = false;
  }
  last_order = order.empty() ? last_order : order;
  order.clear();
  current = -1;
  next_reduce = 0;
  final_queued = false;
  phase = Phase::kForward;
  if (!last_order.empty() && options.prefetch() && world > 1) launch_gather(last_order.front());
}

void ShardingEngine::Impl::after_forward() {
  std::lock_guard lock(mutex);
  Unobserved quiet;
  rethrow_deferred();
  if (!at::GradMode::is_enabled()) {  // evaluation: nothing will be needed for a backward
    for (std::size_t u = 0; u < units.size(); ++u) reshard(static_cast<int>(u));
    last_order = order;
    phase = Phase::kIdle;
    return;
  }
  // The last unit's forward stays gathered: its backward comes first.
  reduce_order.assign(order.rbegin(), order.rend());
  for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
    if (std::find(order.begin(), order.end(), u) == order.end()) reduce_order.push_back(u);
  }
  current = -1;
  phase = Phase::kBackward;
}

// An exception left the module's forward: says on this rank's stderr which
// unit it was computing (the launcher's failure summary shows that tail).
void ShardingEngine::Impl::forward_failed() noexcept {
  try {
    std::lock_guard lock(mutex);
    if (phase != Phase::kForward) return;
    const std::string where = current >= 0 ? units[static_cast<std::size_t>(current)].label()
                                           : "no unit (before any unit's parameters were used)";
    util::write_line(STDERR_FILENO,
                     core::message(core::at(group), "FullyShardedDataParallel: the forward threw in {}",
                                   where));
  } catch (...) {  // a failed note must not replace the user's exception
  }
}

void ShardingEngine::Impl::on_gradient(std::size_t param) {
  std::lock_guard lock(mutex);
  Unobserved quiet;
  if (!final_queued) {
    final_queued = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
  }
  if (phase != Phase::kBackward) phase = Phase::kBackward;
  Unit& unit = units[static_cast<std::size_t>(param_unit[param])];
  ++unit.arrived;
  launch_ready_reduces();
}

// Reduce-scatters go out in one order on every rank (reduce_order); a unit
// whose gradients are complete waits for those before it in that order.
void ShardingEngine::Impl::launch_ready_reduces() {
  while (next_reduce < reduce_order.size()) {
    const int u = reduce_order[next_reduce];
    Unit& unit = units[static_cast<std::size_t>(u)];
    if (unit.arrived < unit.trainable) return;
    ++next_reduce;
    reshard(u);  // its gathered parameters go before its gradients are packed
    if (require_sync && unit.trainable > 0) launch_reduce(u);
    unit.reduced = true;
  }
}

void ShardingEngine::Impl::finish_backward() {
  std::lock_guard lock(mutex);
  Unobserved quiet;
  rethrow_deferred();
  for (; next_reduce < reduce_order.size(); ++next_reduce) {  // parameters without a gradient
    const int u = reduce_order[next_reduce];
    if (require_sync && units[static_cast<std::size_t>(u)].trainable > 0) launch_reduce(u);
    units[static_cast<std::size_t>(u)].reduced = true;
  }
  drain_reduces(0);
  for (std::size_t u = 0; u < units.size(); ++u) reshard(static_cast<int>(u));
  phase = Phase::kIdle;
  final_queued = false;
}

// --- ShardingEngine ---------------------------------------------------------

ShardingEngine::ShardingEngine(std::shared_ptr<torch::nn::Module> module, FullyShardOptions options,
                               dist::ProcessGroup& group)
    : impl_(std::make_unique<Impl>(std::move(module), std::move(options), group)) {}

ShardingEngine::~ShardingEngine() = default;

void ShardingEngine::before_forward() { impl_->before_forward(); }
void ShardingEngine::after_forward() { impl_->after_forward(); }
void ShardingEngine::forward_failed() noexcept { impl_->forward_failed(); }

std::optional<c10::ScalarType> ShardingEngine::input_dtype() const {
  const auto& mp = impl_->options.mixed_precision();
  return mp.cast_forward_inputs() ? mp.param_dtype() : std::nullopt;
}

std::optional<c10::ScalarType> ShardingEngine::output_dtype() const {
  return impl_->options.mixed_precision().output_dtype();
}

void ShardingEngine::set_require_sync(bool sync) {
  std::lock_guard lock(impl_->mutex);
  impl_->require_sync = sync;
}

bool ShardingEngine::require_sync() const { return impl_->require_sync; }

std::vector<torch::Tensor> ShardingEngine::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : impl_->params) out.push_back(p->shard);
  return out;
}

std::vector<std::string> ShardingEngine::parameter_names() const {
  std::vector<std::string> out;
  for (const auto& p : impl_->params) out.push_back(p->name);
  return out;
}

std::vector<std::vector<std::string>> ShardingEngine::unit_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& unit : impl_->units) {
    out.emplace_back();
    for (const ParamShard* p : unit.params) out.back().push_back(p->name);
  }
  return out;
}

ShardingStats ShardingEngine::stats() const { return impl_->stats; }

int ShardingEngine::rank() const { return impl_->rank; }

std::vector<const ParamShard*> ShardingEngine::layouts() const {
  std::vector<const ParamShard*> out;
  for (const auto& p : impl_->params) out.push_back(p.get());
  return out;
}

}  // namespace rankwise::parallel::fsdp
