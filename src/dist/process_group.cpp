#include "rankwise/dist/process_group.h"

#include <signal.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "dist/c10_logging.h"
#include "dist/c10d_text.h"
#include "dist/collective_check.h"
#include "dist/collective_wait.h"
#include "compat/barrier.h"
#include "compat/gloo_group.h"
#include "compat/nccl_group.h"
#include "dist/gloo_abort.h"
#include "dist/gloo_interfaces.h"
#include "dist/monitored_barrier.h"
#include "wire/hang_diagnosis.h"
#include "util/text.h"
#include "diag/collective_clock.h"
#include "diag/completion_poller.h"
#include "diag/collective_progress_publisher.h"
#include "wire/collective_progress.h"
#include "core/check.h"
#include "core/process_env.h"
#include "rankwise/device.h"
#include "rankwise/error.h"
#include "wire/worker_env.h"

namespace rankwise::dist {
namespace {

std::unique_ptr<ProcessGroup>& global_group() {
  static std::unique_ptr<ProcessGroup> group;
  return group;
}

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
    core::raise<ConfigError>(core::At{env.rank, env.world_size},
                             "unknown backend '{}'; use \"auto\", \"gloo\" or \"nccl\"", backend);
  }
  if (backend == "gloo") return std::nullopt;
  const bool compiled = compat::nccl_compiled();
  const DeviceAssignment assigned =
      compiled ? device_assignment(env, DeviceKind::kAuto) : DeviceAssignment{};
  if (assigned.is_cuda()) return assigned.torch_device();
  if (backend == "nccl") {
    core::raise<ConfigError>(
        core::At{env.rank, env.world_size},
        "InitOptions().backend(\"nccl\"): {}; use \"gloo\" (CPU tensors, and CUDA tensors where "
        "libtorch has CUDA) or \"auto\" (NCCL when every rank has its own GPU, else Gloo)",
        (compiled ? fmt::format("this rank has no GPU of its own (rankwise::device() is the CPU: "
                                "CUDA is not available, or LOCAL_WORLD_SIZE={} processes share "
                                "fewer visible GPUs; NCCL needs one GPU per rank)",
                                env.local_world_size)
                  : std::string("this build of rankwise has no NCCL (its libtorch " TORCH_VERSION
                                " was built without CUDA)")));
  }
  return std::nullopt;
}

// The device the monitor's table shows until monitor::set_device() names
// another: NCCL's, else rankwise::device() (CPU when that cannot be known).
std::string heartbeat_device(const LaunchEnv& env, const std::optional<torch::Device>& nccl) {
  if (nccl) return nccl->str();
  try {
    return device_assignment(env, DeviceKind::kAuto).torch_device().str();
  } catch (const std::exception&) {
    return "cpu";
  }
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "";
}

// "all_reduce #3 (Float [4], sum) at train.cpp:88": how errors name a call.
std::string call_name(diag::CollectiveRecord call, uint64_t sequence) {
  call.sequence = sequence;
  return describe(call);
}

// A collective as the flight recorder keeps it.
diag::CollectiveRecord make_record(const char* operation, const torch::Tensor& tensor,
                             const std::source_location& own_site) {
  const std::source_location site = CallerSite::reported(own_site);
  diag::CollectiveRecord r;
  r.operation = operation;
  if (tensor.defined()) {
    r.dtype = c10::toString(tensor.scalar_type());
    r.sizes = tensor.sizes().vec();
  }
  r.file = site.file_name();
  r.line = site.line();
  return r;
}

// RANKWISE_FLIGHT_RECORDER_SIZE: entries kept (default 2000, 0 = off).
std::size_t flight_recorder_size(const LaunchEnv& env) {
  const auto text = get_env("RANKWISE_FLIGHT_RECORDER_SIZE");
  if (!text) return 2000;
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || end != text->data() + text->size() || value > 10000000) {
    core::raise<ConfigError>(
        core::At{env.rank, env.world_size},
        "RANKWISE_FLIGHT_RECORDER_SIZE='{}' is not a number of entries in [0, 10000000]; unset it "
        "for the default (2000) or set 0 to turn the flight recorder off",
        *text);
  }
  return value;
}

// RANKWISE_DEBUG: "detail" turns checked collectives on; unset or "off" leaves them.
bool debug_detail(const LaunchEnv& env) {
  const auto text = get_env("RANKWISE_DEBUG");
  if (!text || text->empty() || *text == "off") return false;
  if (*text == "detail") return true;
  core::raise<ConfigError>(
      core::At{env.rank, env.world_size},
      "RANKWISE_DEBUG='{}' is not known; use RANKWISE_DEBUG=detail (check that every rank calls "
      "the same collective, naming each rank's call site) or off",
      *text);
}

// ": CAUSE" for a failed rendezvous's message, or "".
std::string rendezvous_cause(const std::exception& e, std::chrono::milliseconds timeout) {
  const std::string cause = rendezvous_failure_cause(e.what(), timeout);
  return cause.empty() ? "" : ": " + cause;
}

std::string store_prefix(const LaunchEnv& env) {
  // A prefix per restart keeps keys of a failed attempt from leaking into the next.
  return wire::attempt_prefix(env.restart_count,
                                get_env(wire::kJobKeyVariable).value_or(""));
}

std::vector<std::optional<wire::CollectiveProgress>> read_progress(c10d::Store& store,
                                                                 int world_size) {
  std::vector<std::optional<wire::CollectiveProgress>> all(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    try {
      const std::string key = wire::progress_key(r);
      if (!store.check({key})) continue;
      const auto bytes = store.get(key);
      all[static_cast<std::size_t>(r)] =
          wire::decode_progress(std::string(bytes.begin(), bytes.end()));
    } catch (const std::exception&) {
      // The store is gone: report what was read.
    }
  }
  return all;
}

}  // namespace

ProcessGroup::ProcessGroup(const LaunchEnv& env, const InitOptions& options)
    : env_(env), options_(options) {
  // Before the first c10d call: its warnings appear as rankwise lines, not raw glog.
  route_c10_messages(core::where({env_.rank, env_.world_size}));
  if (options_.timeout().count() <= 0) {
    core::raise<ConfigError>("InitOptions::timeout must be positive");
  }
  if (debug_detail(env_)) options_.check_collectives(true);
  recorder_ = std::make_shared<diag::FlightRecorder>(flight_recorder_size(env_));
  // Gloo's fatal checks abort the process: say first what they mean, and where.
  install_gloo_abort_report(recorder_, core::At{env_.rank, env_.world_size});
  if (options_.gloo_threads() < 1) {
    core::raise<ConfigError>("InitOptions::gloo_threads is {}; it must be at least 1",
                             options_.gloo_threads());
  }
  // Before the rendezvous: a bad backend or interface is ConfigError.
  const std::optional<torch::Device> nccl = nccl_device(env_, options_.backend());
  auto devices = gloo_devices(env_);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env_.master_port);
  // A single process started without a launcher hosts its own store: on a
  // free port (0), unless MASTER_PORT names one, so that several such
  // processes on one machine do not collide on torchrun's default 29500.
  if (env_.source == LaunchSource::kNone && env_.world_size == 1 && !get_env(wire::kMasterPortVariable)) {
    store_options.port = 0;
  }
  store_options.isServer = !env_.agent_store && env_.rank == 0;
  store_options.numWorkers = env_.agent_store ? c10::nullopt
                                              : c10::optional<std::size_t>(env_.world_size);
  store_options.waitWorkers = false;
  store_options.timeout = options_.timeout();
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, store_options);
    store_ = c10::make_intrusive<c10d::PrefixStore>(store_prefix(env_), tcp);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options_.timeout());
    gloo_options->devices = std::move(devices);
    gloo_options->threads = options_.gloo_threads();
    group_ = nccl ? compat::make_gloo_nccl_group(store_, env_.rank, env_.world_size,
                                                         gloo_options, *nccl, options_.timeout())
                  : compat::make_gloo_group(store_, env_.rank, env_.world_size,
                                                    gloo_options);
  } catch (const std::exception& e) {
    core::raise<RendezvousError>(
        core::At{env_.rank, env_.world_size},
        "rendezvous at {}:{} failed{}. Check that every rank was started with the same "
        "MASTER_ADDR, MASTER_PORT and WORLD_SIZE. Original error: {}",
        env_.master_addr, env_.master_port, rendezvous_cause(e, options_.timeout()), e.what());
  }
  if (env_.world_size > 1) {
    try {
      publisher_ = std::make_unique<diag::CollectiveProgressPublisher>(
          env_.master_addr, env_.master_port, store_prefix(env_), env_.rank, recorder_,
          options_.timeout(), heartbeat_device(env_, nccl));
    } catch (const std::exception& e) {
      core::raise<RendezvousError>(
          core::At{env_.rank, env_.world_size},
          "cannot open a second connection to the store at {}:{} (for progress reports): {}",
          env_.master_addr, env_.master_port, e.what());
    }
  }
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::backend() const {
  const std::string name = group_->getBackendName();
  return name == "nccl" ? compat::kGlooNcclBackendName : name;
}

void ProcessGroup::all_reduce(torch::Tensor& tensor, ReduceOp op, std::source_location site) {
  if (op == ReduceOp::kAvg && !tensor.is_floating_point()) {
    core::raise<ConfigError>(core::at(*this),
                             "all_reduce with ReduceOp::kAvg needs a floating-point tensor, got "
                             "{}; reduce a sum and divide yourself",
                             std::string(c10::toString(tensor.scalar_type())));
  }
  auto call = make_record("all_reduce", tensor, site);
  call.reduce_op = reduce_op_name(op);
  recorded(call, [&](uint64_t sequence) {
    check_call(call, tensor, sequence);
    std::vector<torch::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.timeout = options_.timeout();
    run_collective(core::where(core::at(*this)), call_name(call, sequence), timeout(),
                           [&] { return group_->allreduce(tensors, opts); },
                           [&] { return explain_failure(sequence); });
  });
  if (op == ReduceOp::kAvg) tensor.div_(env_.world_size);
}

void ProcessGroup::broadcast(torch::Tensor& tensor, int root, std::source_location site) {
  if (root < 0 || root >= env_.world_size) {
    core::raise<ConfigError>(core::at(*this), "broadcast root {} is not a rank in [0, {})", root,
                             env_.world_size);
  }
  auto call = make_record("broadcast", tensor, site);
  call.root = root;
  recorded(call, [&](uint64_t sequence) {
    check_call(call, tensor, sequence);
    std::vector<torch::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = options_.timeout();
    run_collective(core::where(core::at(*this)), call_name(call, sequence), timeout(),
                           [&] { return group_->broadcast(tensors, opts); },
                           [&] { return explain_failure(sequence); });
  });
}

std::vector<torch::Tensor> ProcessGroup::all_gather(const torch::Tensor& tensor,
                                                    std::source_location site) {
  const auto call = make_record("all_gather", tensor, site);
  std::vector<torch::Tensor> result;
  recorded(call, [&](uint64_t sequence) {
    check_call(call, tensor, sequence);
    result = gather(tensor, call_name(call, sequence), sequence);
  });
  return result;
}

std::vector<torch::Tensor> ProcessGroup::gather(const torch::Tensor& tensor,
                                                const std::string& operation, uint64_t sequence) {
  auto input = tensor.contiguous();
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < env_.world_size; ++r) outputs[0].push_back(torch::empty_like(input));
  std::vector<torch::Tensor> inputs{input};
  c10d::AllgatherOptions opts;
  opts.timeout = options_.timeout();
  run_collective(core::where(core::at(*this)), operation, timeout(),
                         [&] { return group_->allgather(outputs, inputs, opts); },
                         [&] { return explain_failure(sequence); });
  return outputs[0];
}

void ProcessGroup::barrier(std::source_location site) {
  const auto call = make_record("barrier", torch::Tensor(), site);
  recorded(call, [&](uint64_t sequence) {
    check_call(call, torch::Tensor(), sequence);
    c10d::BarrierOptions opts;
    opts.timeout = options_.timeout();
    compat::barrier_on_host(opts);  // under NCCL: Gloo's, which blocks the host
    run_collective(core::where(core::at(*this)), call_name(call, sequence), timeout(),
                           [&] { return group_->barrier(opts); },
                           [&] { return explain_failure(sequence); });
  });
}

void ProcessGroup::check_call(const diag::CollectiveRecord& call, const torch::Tensor& tensor,
                              uint64_t sequence) {
  if (!options_.check_collectives() || env_.world_size == 1) return;
  CollectiveCall checked{call.operation, tensor, call.root, call.reduce_op, call.file,
                                 call.line};
  const auto records = gather(encode_call(checked, sequence),
                              call_name(call, sequence) + " (checking that every rank calls it)",
                              sequence);
  const std::string message = mismatch_message(core::where(core::at(*this)), records);
  if (!message.empty()) throw CollectiveMismatchError(message);
}

void ProcessGroup::recorded(diag::CollectiveRecord call,
                            const std::function<void(uint64_t sequence)>& body) {
  call.checked = options_.check_collectives() && env_.world_size > 1 && call.operation != "monitored_barrier";
  const uint64_t sequence = recorder_->enter(std::move(call));
  diag::collective_clock().begin(sequence);
  if (publisher_) publisher_->notify();
  try {
    body(sequence);
  } catch (...) {
    recorder_->end(sequence, false);
    diag::collective_clock().end(sequence);
    if (publisher_) publisher_->notify();
    throw;
  }
  recorder_->end(sequence, true);
  diag::collective_clock().end(sequence);
  if (publisher_) publisher_->notify();
}

void ProcessGroup::record_launched(diag::CollectiveRecord call,
                                   const c10::intrusive_ptr<c10d::Work>& work) {
  const uint64_t sequence = recorder_->enter(std::move(call));
  diag::collective_clock().begin(sequence);
  if (publisher_) publisher_->notify();  // its heartbeat publishes the completion
  auto ended = [recorder = recorder_, sequence](bool ok) {
    recorder->end(sequence, ok);
    diag::collective_clock().end(sequence);
  };
  const auto future = work->getFuture();
  if (future->devices().empty()) {  // a CPU work: its future completes when it has run
    future->addCallback([ended](c10::ivalue::Future& f) { ended(!f.hasError()); });
    return;
  }
  if (!device_completions_) {
    device_completions_ = std::make_unique<diag::CompletionPoller>(std::chrono::microseconds(500));
  }
  device_completions_->add(
      [work]() -> std::optional<bool> {
        if (!work->isCompleted()) return std::nullopt;
        return work->exception() == nullptr;
      },
      ended);
}

std::string ProcessGroup::explain_failure(uint64_t sequence) {
  recorder_->end(sequence, false);  // so that the progress and the dump say "failed"
  std::string text;
  if (publisher_) {
    publisher_->flush(std::chrono::milliseconds(500));
    const auto progress = read_progress(*store_, env_.world_size);
    const std::string missing =
        wire::describe_missing_ranks(env_.rank, sequence, progress, wire::unix_ms_now());
    text += missing.empty() ? "every other rank had entered it" : missing;
  }
  if (const auto dir = get_env("RANKWISE_FLIGHT_RECORDER_DIR"); dir && recorder_->capacity() > 0) {
    const std::string path = *dir + "/rank" + std::to_string(env_.rank) + ".json";
    try {
      recorder_->dump(path, env_.rank, env_.world_size);
      text += (text.empty() ? "" : ". ") + std::string("Flight recorder: ") + path;
    } catch (const Error& e) {
      text += (text.empty() ? "" : ". ") + std::string(e.what());
    }
  }
  return text;
}

void ProcessGroup::monitored_barrier(const std::string& name, std::chrono::milliseconds timeout,
                                     bool wait_all_ranks, std::source_location site) {
  if (timeout.count() < 0) {
    core::raise<ConfigError>(core::at(*this),
                             "monitored_barrier '{}': the timeout is negative; pass a positive "
                             "one, or 0 for the group's",
                             name);
  }
  if (timeout.count() == 0) timeout = options_.timeout();
  auto call = make_record("monitored_barrier", torch::Tensor(), site);
  call.name = name;
  const uint64_t instance = ++monitored_barriers_;
  recorded(call, [&](uint64_t sequence) {
    if (env_.world_size == 1) return;
    MonitoredBarrier barrier(*store_, core::at(*this), name,
                             diag::short_call_site(call.file, call.line), instance, sequence);
    barrier.arrive();
    barrier.wait(
        timeout, wait_all_ranks, [&] { return read_progress(*store_, env_.world_size); },
        [&] { publisher_->flush(std::chrono::milliseconds(500)); });
  });
}

ProcessGroup& init(const InitOptions& options) {
  struct sigaction pipe {};
  if (::sigaction(SIGPIPE, nullptr, &pipe) == 0 && pipe.sa_handler == SIG_DFL)
    ::signal(SIGPIPE, SIG_IGN);
  auto& group = global_group();
  if (!group) {
    group = std::make_unique<ProcessGroup>(LaunchEnv::from_environment(), options);
    core::set_process_env(group->env());
  }
  return *group;
}

bool is_initialized() { return global_group() != nullptr; }

ProcessGroup& process_group() {
  auto& group = global_group();
  if (!group) {
    core::raise<Error>(
        "the process group is not initialized; call rankwise::dist::init() first, on every rank");
  }
  return *group;
}

void shutdown() {
  global_group().reset();
  core::set_process_env(std::nullopt);
}

int rank() { return core::process_env().rank; }
int world_size() { return core::process_env().world_size; }
int local_rank() { return core::process_env().local_rank; }
int rank_or_zero() { return is_initialized() ? process_group().rank() : 0; }
int world_size_or_one() { return is_initialized() ? process_group().world_size() : 1; }

void all_reduce(torch::Tensor& tensor, ReduceOp op, std::source_location site) {
  process_group().all_reduce(tensor, op, site);
}
void broadcast(torch::Tensor& tensor, int root, std::source_location site) {
  process_group().broadcast(tensor, root, site);
}
std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor, std::source_location site) {
  return process_group().all_gather(tensor, site);
}
void barrier(std::source_location site) { process_group().barrier(site); }
void monitored_barrier(const std::string& name, std::chrono::milliseconds timeout,
                       bool wait_all_ranks, std::source_location site) {
  process_group().monitored_barrier(name, timeout, wait_all_ranks, site);
}

}  // namespace rankwise::dist
