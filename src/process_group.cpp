#include "rankwise/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <mutex>
#include <optional>

#include "detail/c10_logging.h"
#include "detail/collective_check.h"
#include "detail/collective_wait.h"
#include "detail/compat/barrier.h"
#include "detail/compat/gloo_group.h"
#include "detail/compat/nccl_group.h"
#include "detail/gloo_devices.h"
#include "detail/where.h"
#include "rankwise/device.h"
#include "rankwise/error.h"

namespace rankwise {
namespace {

std::unique_ptr<ProcessGroup>& global_group() {
  static std::unique_ptr<ProcessGroup> group;
  return group;
}

using detail::where;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// The device NCCL is bound to when `backend` ("auto", "gloo" or "nccl") means
// NCCL on this rank: this rank's own GPU (rankwise::device()); nullopt for Gloo.
std::optional<torch::Device> nccl_device(const LaunchEnv& env, const std::string& backend) {
  if (backend != "auto" && backend != "gloo" && backend != "nccl") {
    throw ConfigError("rankwise: " + where(env.rank, env.world_size) + ": unknown backend '" +
                      backend + "'; use \"auto\", \"gloo\" or \"nccl\"");
  }
  if (backend == "gloo") return std::nullopt;
  const bool compiled = detail::compat::nccl_compiled();
  const DeviceAssignment assigned =
      compiled ? device_assignment(env, DeviceKind::kAuto) : DeviceAssignment{};
  if (assigned.is_cuda()) return assigned.torch_device();
  if (backend == "nccl") {
    throw ConfigError(
        "rankwise: " + where(env.rank, env.world_size) + ": InitOptions().backend(\"nccl\"): " +
        (compiled ? "this rank has no GPU of its own (rankwise::device() is the CPU: CUDA is not "
                    "available, or LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size) +
                    " processes share fewer visible GPUs; NCCL needs one GPU per rank)"
                  : std::string("this build of rankwise has no NCCL (its libtorch " TORCH_VERSION
                                " was built without CUDA)")) +
        "; use \"gloo\" (CPU tensors, and CUDA tensors where libtorch has CUDA) or \"auto\" "
        "(NCCL when every rank has its own GPU, else Gloo)");
  }
  return std::nullopt;
}

}  // namespace

ProcessGroup::ProcessGroup(const LaunchEnv& env, const InitOptions& options)
    : env_(env), options_(options) {
  // Before the first c10d call: its warnings appear as rankwise lines, not raw glog.
  detail::route_c10_messages(where(env_.rank, env_.world_size));
  if (options_.timeout().count() <= 0) {
    throw ConfigError("rankwise: InitOptions::timeout must be positive");
  }
  if (options_.gloo_threads() < 1) {
    throw ConfigError("rankwise: InitOptions::gloo_threads is " +
                      std::to_string(options_.gloo_threads()) + "; it must be at least 1");
  }
  // Before the rendezvous: a bad backend or interface is ConfigError.
  const std::optional<torch::Device> nccl = nccl_device(env_, options_.backend());
  auto devices = detail::gloo_devices(env_);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env_.master_port);
  // A single process started without a launcher hosts its own store: on a
  // free port (0), unless MASTER_PORT names one, so that several such
  // processes on one machine do not collide on torchrun's default 29500.
  if (env_.source == LaunchSource::kNone && env_.world_size == 1 && !get_env("MASTER_PORT")) {
    store_options.port = 0;
  }
  store_options.isServer = !env_.agent_store && env_.rank == 0;
  store_options.numWorkers = env_.agent_store ? c10::nullopt
                                              : c10::optional<std::size_t>(env_.world_size);
  store_options.waitWorkers = false;
  store_options.timeout = options_.timeout();
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, store_options);
    // A prefix per restart keeps keys of a failed attempt from leaking into the next.
    store_ = c10::make_intrusive<c10d::PrefixStore>(
        "rankwise/" + std::to_string(env_.restart_count), tcp);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options_.timeout());
    gloo_options->devices = std::move(devices);
    gloo_options->threads = options_.gloo_threads();
    group_ = nccl ? detail::compat::make_gloo_nccl_group(store_, env_.rank, env_.world_size,
                                                         gloo_options, *nccl, options_.timeout())
                  : detail::compat::make_gloo_group(store_, env_.rank, env_.world_size,
                                                    gloo_options);
  } catch (const std::exception& e) {
    throw RendezvousError("rankwise: " + where(env_.rank, env_.world_size) + ": rendezvous at " +
                          env_.master_addr + ":" + std::to_string(env_.master_port) +
                          " failed (timeout " + std::to_string(options_.timeout().count()) +
                          " ms). Check that every rank was started with the same MASTER_ADDR, "
                          "MASTER_PORT and WORLD_SIZE. Original error: " + e.what());
  }
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::backend() const {
  const std::string name = group_->getBackendName();
  return name == "nccl" ? detail::compat::kGlooNcclBackendName : name;
}

void ProcessGroup::all_reduce(torch::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::kAvg && !tensor.is_floating_point()) {
    throw ConfigError("rankwise: " + where(*this) +
                      ": all_reduce with ReduceOp::kAvg needs a floating-point tensor, got " +
                      std::string(c10::toString(tensor.scalar_type())) +
                      "; reduce a sum and divide yourself");
  }
  check_call("all_reduce", tensor, -1);
  std::vector<torch::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = options_.timeout();
  detail::run_collective(where(*this), "all_reduce", timeout(),
                         [&] { return group_->allreduce(tensors, opts); });
  if (op == ReduceOp::kAvg) tensor.div_(env_.world_size);
}

void ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  if (root < 0 || root >= env_.world_size) {
    throw ConfigError("rankwise: " + where(*this) + ": broadcast root " + std::to_string(root) +
                      " is not a rank in [0, " + std::to_string(env_.world_size) + ")");
  }
  check_call("broadcast", tensor, root);
  std::vector<torch::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = options_.timeout();
  detail::run_collective(where(*this), "broadcast", timeout(),
                         [&] { return group_->broadcast(tensors, opts); });
}

std::vector<torch::Tensor> ProcessGroup::all_gather(const torch::Tensor& tensor) {
  check_call("all_gather", tensor, -1);
  return gather(tensor, "all_gather");
}

std::vector<torch::Tensor> ProcessGroup::gather(const torch::Tensor& tensor,
                                                const std::string& operation) {
  auto input = tensor.contiguous();
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < env_.world_size; ++r) outputs[0].push_back(torch::empty_like(input));
  std::vector<torch::Tensor> inputs{input};
  c10d::AllgatherOptions opts;
  opts.timeout = options_.timeout();
  detail::run_collective(where(*this), operation.c_str(), timeout(),
                         [&] { return group_->allgather(outputs, inputs, opts); });
  return outputs[0];
}

void ProcessGroup::barrier() {
  check_call("barrier", torch::Tensor(), -1);
  c10d::BarrierOptions opts;
  opts.timeout = options_.timeout();
  detail::compat::barrier_on_host(opts);  // under NCCL: Gloo's, which blocks the host
  detail::run_collective(where(*this), "barrier", timeout(),
                         [&] { return group_->barrier(opts); });
}

void ProcessGroup::check_call(const char* operation, const torch::Tensor& tensor, int root) {
  if (!options_.check_collectives() || env_.world_size == 1) return;
  const auto records =
      gather(detail::encode_call({operation, tensor, root}, checked_calls_++),
             std::string(operation) + " (checking that every rank calls it)");
  const std::string message = detail::mismatch_message(where(*this), records);
  if (!message.empty()) throw CollectiveMismatchError(message);
}

ProcessGroup& init(const InitOptions& options) {
  auto& group = global_group();
  if (!group) group = std::make_unique<ProcessGroup>(LaunchEnv::from_environment(), options);
  return *group;
}

bool is_initialized() { return global_group() != nullptr; }

ProcessGroup& process_group() {
  auto& group = global_group();
  if (!group) {
    throw Error("rankwise: the process group is not initialized; call rankwise::init() first, "
                "on every rank");
  }
  return *group;
}

void shutdown() { global_group().reset(); }

int rank() { return is_initialized() ? process_group().rank() : LaunchEnv::from_environment().rank; }
int world_size() {
  return is_initialized() ? process_group().world_size() : LaunchEnv::from_environment().world_size;
}
int local_rank() {
  return is_initialized() ? process_group().local_rank() : LaunchEnv::from_environment().local_rank;
}

void all_reduce(torch::Tensor& tensor, ReduceOp op) { process_group().all_reduce(tensor, op); }
void broadcast(torch::Tensor& tensor, int root) { process_group().broadcast(tensor, root); }
std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) {
  return process_group().all_gather(tensor);
}
void barrier() { process_group().barrier(); }

}  // namespace rankwise
