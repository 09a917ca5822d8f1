#include "rankwise/parallel/ddp.h"

#include <gloo/common/error.h>

#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "dist/c10_logging.h"
#include "dist/c10d_text.h"
#include "compat/reducer.h"
#include "parallel/ddp/join.h"
#include "parallel/ddp/gradient_arrivals.h"
#include "util/text.h"
#include "parallel/ddp/model_layout.h"
#include "parallel/ddp/recorded_group.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::parallel::ddp {
namespace {

constexpr int64_t kMiB = 1024 * 1024;
// PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES and its module-state broadcast bucket.
constexpr int64_t kFirstBucketBytes = kMiB;
constexpr int64_t kBroadcastBucketBytes = 250 * kMiB;

}  // namespace

struct DataParallelEngine::Impl {
  std::shared_ptr<torch::nn::Module> module;
  DistributedDataParallelOptions options;
  dist::ProcessGroup* group = nullptr;
  std::vector<torch::Tensor> params;  // parameters that require grad
  std::vector<std::string> names;     // their dotted names
  std::vector<torch::Tensor> buffers;
  // Held by shared_ptr for the Logger, which the Reducer needs: without one
  // it dereferences an empty weak_ptr (SIGSEGV) once the set of unused
  // parameters changes between steps. The Logger goes first (declared last).
  std::shared_ptr<c10d::Reducer> reducer;
  std::shared_ptr<c10d::Logger> logger;
  // Which parameters the Reducer still waits for (named in its error).
  std::unique_ptr<GradientArrivals> arrivals;
  bool require_forward_param_sync = true;
  int64_t iterations = 0;  // training forwards so far
  // The Reducer's group: c10d's, with its all_reduces in the flight recorder
  // (recorded_group.h), named after `step` (the training step; the join
  // step while shadowing). Shared with that group's naming function.
  struct StepName {
    std::atomic<int64_t> step{0};
    std::atomic<bool> shadowing{false};
  };
  std::shared_ptr<StepName> step_name = std::make_shared<StepName>();
  c10::intrusive_ptr<c10d::ProcessGroup> recorded_group;
  std::optional<DdpJoin> uneven;  // uneven inputs: the Join protocol (ddp_join.h)

  void broadcast_states(const std::vector<torch::Tensor>& tensors, int root = 0) {
    if (tensors.empty() || group->world_size() == 1) return;
    std::vector<torch::Tensor> detached;
    for (const auto& t : tensors) detached.push_back(t.detach());
    try {
      c10d::broadcast_coalesced(group->c10d_group(), detached, kBroadcastBucketBytes, root);
    } catch (const std::exception& e) {
      core::raise<PeerError>(core::at(*group),
                             "DistributedDataParallel: broadcast of parameters/buffers from rank "
                             "{} failed; a peer probably exited. Original error: {}",
                             root, dist::message_of(e));
    }
  }

  std::vector<torch::Tensor> module_states() const {
    auto states = module->parameters(true);
    states.insert(states.end(), buffers.begin(), buffers.end());
    return states;
  }

  // The Reducer's errors in rankwise's words, keeping c10d's text (its
  // Python-only advice translated, see c10d_text.h). When some parameter got
  // no gradient in the last synchronizing backward (rankwise's own count,
  // see gradient_arrivals.h), the error is the Reducer's "did not receive
  // grad": it names the parameters and says what to do in C++ terms.
  [[noreturn]] void rethrow_reducer_error(const std::exception& e) {
    const std::string text = dist::in_rankwise_terms(dist::message_of(e));
    if (dynamic_cast<const ::gloo::IoException*>(&e) != nullptr) {  // e.g. in rebuild_buckets
      core::raise<PeerError>(core::at(*group),
                             "DistributedDataParallel: a collective of the Reducer failed; a peer "
                             "probably exited. Original error: {}",
                             text);
    }
    std::vector<std::string> missing;
    for (size_t index : arrivals->missing()) missing.push_back(names[index]);
    if (!missing.empty()) {
      core::raise<Error>(
          core::at(*group),
          "DistributedDataParallel: parameter(s) [{}] received no gradient in the previous "
          "backward pass, so their gradients were not all_reduced. {}. c10d's error: {}",
          util::join_strings(missing), unused_parameter_advice(), text);
    }
    core::raise<Error>(core::at(*group), "DistributedDataParallel: {}", text);
  }

  std::string unused_parameter_advice() const {
    if (options.static_graph()) {
      return "With DistributedDataParallelOptions().static_graph(true) every step must use "
             "the same parameters; when the set changes, construct DistributedDataParallel "
             "without static_graph(true) and with find_unused_parameters(true)";
    }
    if (options.find_unused_parameters()) {
      return "With find_unused_parameters(true) this means that a tensor forward() returned "
             "did not take part in the loss; make every returned tensor take part in the loss";
    }
    return "Make every parameter take part in the loss, or construct DistributedDataParallel "
           "with DistributedDataParallelOptions().find_unused_parameters(true)";
  }

  // static_graph: in the first step the Reducer only records which
  // parameters get a gradient, and all_reduces every bucket at the end of
  // backward when delay_all_reduce() is called, which PyTorch queues from
  // its _DDPSink autograd function. Here: a hook on each output queues it
  // (once) as a final callback of the autograd engine.
  void delay_all_reduce_to_end_of_backward(const std::vector<torch::Tensor>& outputs) {
    auto queued = std::make_shared<std::atomic<bool>>(false);
    std::weak_ptr<c10d::Reducer> weak_reducer = reducer;
    for (torch::Tensor output : outputs) {
      if (!output.requires_grad()) continue;
      output.register_hook([queued, weak_reducer](const torch::Tensor&) {
        if (queued->exchange(true)) return;
        torch::autograd::Engine::get_default_engine().queue_callback([weak_reducer] {
          if (auto r = weak_reducer.lock()) r->delay_all_reduce();
        });
      });
    }
  }

  // The rest of a training step seen from a rank in join(): the same
  // collectives with zero gradients (PyTorch's _DDPJoinHook).
  void shadow_gradient_all_reduce() {
    reducer->rebuild_buckets();
    if (options.broadcast_buffers() && require_forward_param_sync) broadcast_states(buffers);
    // On the Reducer's group, as the training ranks' Reducer: both sides
    // record these in the flight recorder, neither checks them in debug mode.
    step_name->step = iterations;
    step_name->shadowing = true;
    struct Done {
      StepName& name;
      ~Done() { name.shadowing = false; }
    } done{*step_name};
    auto all_reduce = [this](at::Tensor zeros) {
      std::vector<at::Tensor> tensors{zeros};
      try {
        recorded_group->allreduce(tensors)->wait();
      } catch (const std::exception& e) {
        core::raise<PeerError>(core::at(*group),
                               "DistributedDataParallel: join()'s all_reduce of zero gradients "
                               "failed; a peer probably exited. Original error: {}",
                               dist::message_of(e));
      }
    };
    for (auto& bucket : reducer->get_grad_buckets(/*return_zero_tensors=*/true)) {
      all_reduce(bucket.getBufferRef());
    }
    // With find_unused_parameters the training ranks also all_reduce their
    // map of used parameters after the last bucket (PyTorch's
    // _match_unused_params_allreduce).
    if (options.find_unused_parameters() && !options.static_graph()) {
      all_reduce(torch::zeros_like(reducer->get_local_used_map_on_device()));
    }
  }
  // The parameters that require a gradient, with their names.
  void collect_parameters() {
    for (const auto& item : module->named_parameters(true)) {
      if (item.value().requires_grad()) {
        params.push_back(item.value());
        names.push_back(item.key());
      }
    }
    if (params.empty()) {
      core::raise<ConfigError>(
          "DistributedDataParallel: the module has no parameter that requires a gradient; there "
          "is nothing to train");
    }
    buffers = module->buffers(true);
  }

  // Every rank must build the same model: same names, then c10d's check of
  // number, shape and dtype.
  void check_same_model() const {
    if (group->world_size() == 1) return;
    check_same_parameter_layout(*group, params, names);
    try {
      c10d::verify_params_across_processes(group->c10d_group(), params, c10::nullopt);
    } catch (const std::exception& e) {
      core::raise<ConfigError>(
          core::at(*group),
          "DistributedDataParallel: the model differs across ranks (number, shape or dtype of "
          "parameters). Build the same model on every rank. Original error: {}",
          dist::message_of(e));
    }
  }

  // Buckets by size in reverse parameter order, the order in which the
  // Reducer's own rebuild (after the first backward) lays them out when
  // gradients become ready in reverse order, as they do for layers called in
  // registration order. So the first step of a process sums each element in
  // the same order as every later step: with 3 or more ranks Gloo's ring
  // all_reduce adds in an order that depends on where an element sits in its
  // bucket, and a process restarted from a checkpoint would otherwise add its
  // first step differently (the last bit) from the run that never stopped.
  // (PyTorch's DDP starts from ascending order within each bucket.)
  void build_reducer() {
    const auto cap_bytes = static_cast<int64_t>(options.bucket_cap_mb() * kMiB);
    const bool default_cap = options.bucket_cap_mb() == 25.0;
    std::vector<bool> expect_sparse(params.size(), false);
    std::vector<at::Tensor> ready_order(params.rbegin(), params.rend());
    std::vector<int64_t> ready_indices(params.size());
    for (size_t i = 0; i < ready_indices.size(); ++i) {
      ready_indices[i] = static_cast<int64_t>(params.size() - 1 - i);
    }
    // The first bucket's limit is the Reducer's (its last argument below).
    const int64_t first_bucket_bytes = default_cap ? kFirstBucketBytes : cap_bytes;
    auto assignment = c10d::compute_bucket_assignment_by_size(
        ready_order, {static_cast<size_t>(first_bucket_bytes), static_cast<size_t>(cap_bytes)},
        expect_sparse, ready_indices);
    std::unordered_map<size_t, std::string> param_names;
    for (size_t i = 0; i < names.size(); ++i) param_names[i] = names[i];
    recorded_group = make_recorded_group(*group, [name = step_name] {
      return name->shadowing
                 ? fmt::format("DistributedDataParallel join after step {}: zero gradients",
                               name->step.load())
                 : fmt::format("DistributedDataParallel step {}: gradients", name->step.load());
    });
    reducer = compat::make_reducer({params, std::get<0>(assignment), std::get<1>(assignment),
                                    recorded_group, expect_sparse, cap_bytes,
                                    options.find_unused_parameters(),
                                    options.gradient_as_bucket_view(), param_names,
                                    first_bucket_bytes});
    // As in PyTorch's DDP, the Reducer gets a Logger: it records errors and
    // graph statistics (and prints nothing); the Reducer calls it without
    // checking on some paths.
    logger = std::make_shared<c10d::Logger>(reducer);
    reducer->set_logger(logger);
    if (options.static_graph()) {
      reducer->set_static_graph();
      logger->set_static_graph();
    }
  }
};

DataParallelEngine::DataParallelEngine(std::shared_ptr<torch::nn::Module> module,
                                       DistributedDataParallelOptions options,
                                       dist::ProcessGroup& group)
    : impl_(std::make_unique<Impl>()) {
  dist::route_c10_messages(
      core::where(core::at(group)));  // this thread's TORCH_WARNs, e.g. the Reducer's
  if (!(options.bucket_cap_mb() >= 0)) {
    core::raise<ConfigError>(
        "DistributedDataParallelOptions::bucket_cap_mb must be >= 0 (0: one bucket per parameter), "
        "got {}",
        options.bucket_cap_mb());
  }
  auto& d = *impl_;
  d.module = std::move(module);
  d.options = options;
  d.group = &group;
  d.collect_parameters();
  d.check_same_model();
  // Every rank starts from rank 0's replica.
  d.broadcast_states(d.module_states());
  d.build_reducer();
  using Expect = GradientArrivals::Expect;
  d.arrivals = std::make_unique<GradientArrivals>(
      d.params, options.static_graph()            ? Expect::kFirstStep
                : options.find_unused_parameters() ? Expect::kReachable
                                                  : Expect::kEvery);
  d.uneven.emplace(group, options.uneven_inputs());
}

DataParallelEngine::~DataParallelEngine() = default;

void DataParallelEngine::before_forward() {
  dist::route_this_thread_c10_warnings();  // the Reducer's warnings, whichever thread trains
  auto& d = *impl_;
  const bool grad = torch::GradMode::is_enabled();
  if (grad && require_sync_) {
    if (d.group->world_size() > 1) d.uneven->start_training_step(d.iterations);
    ++d.iterations;
    d.step_name->step = d.iterations;
    d.reducer->prepare_for_forward();
  }
  if (grad) {
    try {
      d.reducer->rebuild_buckets();
    } catch (const std::exception& e) {
      d.rethrow_reducer_error(e);
    }
  }
  if (d.options.broadcast_buffers() && d.require_forward_param_sync) d.broadcast_states(d.buffers);
}

void DataParallelEngine::after_forward(const std::vector<torch::Tensor>& outputs) {
  auto& d = *impl_;
  if (torch::GradMode::is_enabled()) accumulating_ = !require_sync_;
  if (torch::GradMode::is_enabled() && require_sync_) {
    // kError: the count launched before this forward has run beside it; a
    // peer that ran out makes this rank raise before its gradients are
    // all_reduced, so no rank applies a step with missing gradients.
    if (d.options.uneven_inputs() == UnevenInputs::kError)
      d.uneven->check_inputs_count(d.iterations);
    d.require_forward_param_sync = true;
    try {
      const bool find_unused = d.options.find_unused_parameters() && !d.options.static_graph();
      const std::vector<torch::Tensor> none;
      d.reducer->prepare_for_backward(find_unused ? outputs : none);
      d.arrivals->start_step(find_unused ? outputs : none);
      if (d.options.static_graph() && d.iterations == 1) {
        d.delay_all_reduce_to_end_of_backward(outputs);
      }
    } catch (const std::exception& e) {
      d.rethrow_reducer_error(e);
    }
  } else {
    d.require_forward_param_sync = false;
  }
}

void DataParallelEngine::join() {
  auto& d = *impl_;
  if (d.group->world_size() == 1) return;
  d.uneven->join(d.iterations, [&d] { d.shadow_gradient_all_reduce(); });
  // A parameter that got no gradient in the last step (without
  // find_unused_parameters) left that step unreduced; a next forward would
  // name it, and after the last step join() does (every rank is here).
  try {
    d.reducer->rebuild_buckets();
  } catch (const std::exception& e) {
    d.rethrow_reducer_error(e);
  }
  // Ranks that joined early skipped optimizer steps: every rank takes the
  // replica of the last rank to join.
  if (auto last = d.uneven->most_advanced_rank(d.iterations)) {
    d.broadcast_states(d.module_states(), *last);
  }
}

std::vector<std::vector<std::string>> DataParallelEngine::bucket_parameter_names() const {
  const auto& d = *impl_;
  std::vector<std::vector<std::string>> buckets;
  for (const auto& bucket : d.reducer->get_grad_buckets(/*return_zero_tensors=*/false)) {
    auto& names = buckets.emplace_back();
    for (const auto& p : bucket.getParameters()) {
      const auto it = std::find_if(d.params.begin(), d.params.end(),
                                   [&](const torch::Tensor& q) { return q.is_same(p); });
      names.push_back(it == d.params.end() ? "?" : d.names[it - d.params.begin()]);
    }
  }
  return buckets;
}

void DataParallelEngine::check_replicas() {
  auto& d = *impl_;
  torch::NoGradGuard no_grad;
  // Per parameter: sum and sum of squares in float64.
  auto local = torch::empty({static_cast<int64_t>(d.params.size()), 2}, torch::kFloat64);
  for (size_t i = 0; i < d.params.size(); ++i) {
    auto p = d.params[i].detach().to(torch::kFloat64);
    local[static_cast<int64_t>(i)][0] = p.sum();
    local[static_cast<int64_t>(i)][1] = (p * p).sum();
  }
  auto all = d.group->all_gather(local);
  std::vector<std::string> differences;
  for (size_t i = 0; i < d.params.size(); ++i) {
    std::vector<int> ranks;
    for (int r = 1; r < d.group->world_size(); ++r) {
      if (!all[r][static_cast<int64_t>(i)].equal(all[0][static_cast<int64_t>(i)]))
        ranks.push_back(r);
    }
    if (!ranks.empty()) {
      differences.push_back(d.names[i] + " (ranks " + util::join_strings(ranks) +
                            " differ from rank 0)");
    }
  }
  if (!differences.empty()) {
    core::raise<Error>(
        core::at(*d.group),
        "check_replicas: replicas diverged: {}. Something updated parameters on some ranks only "
        "(an optimizer step or load inside `if (rank == 0)`, or non-deterministic code)",
        util::join_strings(differences));
  }
}

}  // namespace rankwise::parallel::ddp
