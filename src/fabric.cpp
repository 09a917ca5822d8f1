#include "rankwise/fabric.h"

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>

#include "detail/where.h"
#include "detail/write_line.h"
#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/training_state.h"
#include "rankwise/consensus.h"
#include "rankwise/device.h"
#include "rankwise/error.h"
#include "rankwise/fabric_cli.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/monitor/heartbeat.h"
#include "rankwise/seed.h"

namespace rankwise {
namespace detail {

// Keys of TrainingState::extras that identify the run.
constexpr const char* kTrainSamplesKey = "fabric.train_samples";
constexpr const char* kBatchSizeKey = "fabric.batch_size";
constexpr const char* kSeedKey = "fabric.seed";
constexpr const char* kInitialLrKey = "fabric.initial_lr";

// Everything a Fabric and its loaders share.
class FabricCore {
 public:
  FabricOptions options;
  torch::Device device{torch::kCPU};
  std::unique_ptr<CheckpointManager> checkpoints;
  std::optional<Checkpoint> pending;  // loaded, restored when training starts
  std::string pending_path;
  bool resumed = false;  // a checkpoint was restored
  TrainingState state;
  std::function<void()> join;
  bool has_training_loader = false;
  bool warned_passes = false;
  int64_t train_samples = 0;
  int64_t batch_size = 0;
  std::vector<double> initial_lrs;  // each param_group's lr at setup()
  // The last loss given to backward() when it is a one-element CPU tensor
  // (reading a CUDA loss would wait for the GPU): the heartbeat's loss.
  std::optional<double> last_loss;

  void describe_run() {
    if (has_training_loader) {
      state.extras[kTrainSamplesKey] = train_samples;
      state.extras[kBatchSizeKey] = batch_size;
    }
    state.extras[kSeedKey] = static_cast<int64_t>(options.seed());
    if (!initial_lrs.empty()) state.extras[kInitialLrKey] = c10::List<double>(initial_lrs);
  }

  // A resume restores the optimizer's hyper-parameters with its state (as
  // PyTorch's optimizer.load_state_dict does), so a learning rate that this
  // program set differently from the checkpoint's run (e.g. another --lr) is
  // not used: say so. Compared at setup(), before any scheduler changed it.
  void note_other_learning_rate(const std::map<std::string, c10::IValue>& saved) const {
    const auto it = saved.find(kInitialLrKey);
    if (initial_lrs.empty() || it == saved.end() || !it->second.isList()) return;
    std::vector<double> before;  // a generic list once unpickled
    for (const c10::IValue& lr : it->second.toListRef()) {
      if (!lr.isDouble()) return;
      before.push_back(lr.toDouble());
    }
    if (before == initial_lrs) return;
    print0("note: this program set the learning rate {} but the checkpoint's run started with {}; "
           "a resume restores the optimizer's options with its state, so training continues with "
           "the checkpoint's; to use the new one, call param_groups()[i].options().set_lr() "
           "inside the epoch loop (fabric.epochs() restores the checkpoint as the loop starts)",
           fmt::join(initial_lrs, ", "), fmt::join(before, ", "));
  }

  // A resume must see the same data; mid-epoch, also the same batches.
  void check_same_run(const std::map<std::string, c10::IValue>& saved, const std::string& path) {
    auto value = [&](const char* key) -> std::optional<int64_t> {
      auto it = saved.find(key);
      if (it == saved.end() || !it->second.isInt()) return std::nullopt;
      return it->second.toInt();
    };
    note_other_learning_rate(saved);
    if (!has_training_loader) return;
    const auto samples = value(kTrainSamplesKey);
    const auto batch = value(kBatchSizeKey);
    const auto seed = value(kSeedKey);
    if (samples && *samples != train_samples) {
      throw ConfigError(fmt::format(
          "rankwise: {}: {} was written by a run on {} training samples and this run's training "
          "loader has {}: resume with the same data, or start a new run in another checkpoint "
          "directory (or overwrite this one)",
          where(), path, *samples, train_samples));
    }
    if (state.position > 0 && batch && *batch != batch_size) {
      throw ConfigError(fmt::format(
          "rankwise: {}: {} was written in the middle of an epoch with batch size {}; this run has "
          "{}: resume mid-epoch with the same batch size (or from an epoch-end checkpoint)",
          where(), path, *batch, batch_size));
    }
    if ((batch && *batch != batch_size) || (seed && *seed != static_cast<int64_t>(options.seed()))) {
      print0("note: resuming with batch size {} and seed {} (the checkpoint's run used {} and {}); "
             "the run will not match an uninterrupted one",
             batch_size, options.seed(), batch.value_or(batch_size),
             seed.value_or(static_cast<int64_t>(options.seed())));
    }
  }

  // Restores the pending checkpoint, once, on every rank.
  void ensure_resumed() {
    if (!pending) return;
    if (state.model == nullptr) {
      throw ConfigError(fmt::format(
          "rankwise: {}: a checkpoint ({}) is to be resumed but no model was set up: call "
          "Fabric::setup(model, optimizer) (and setup_dataloader, track) before the training loop",
          where(), pending_path));
    }
    Checkpoint checkpoint = std::move(*pending);
    pending.reset();
    restore(checkpoint, state);
    check_same_run(state.extras, pending_path);
    describe_run();
    resumed = true;
    if (state.epoch_stretches.empty()) {
      print0("resumed from {} at step {} (epoch {}, {} samples into it on each rank)",
             pending_path, state.step, state.epoch + 1, state.position);
    } else {
      std::string earlier;
      for (const auto& stretch : state.epoch_stretches) {
        earlier += fmt::format("{}{} samples on each of {} ranks", earlier.empty() ? "" : ", then ",
                               stretch.per_rank, stretch.num_replicas);
      }
      print0("resumed from {} at step {} (epoch {} at world size {}, after {}; the rest of the "
             "epoch is dealt anew, {} samples into it on each rank)",
             pending_path, state.step, state.epoch + 1,
             rankwise::is_initialized() ? rankwise::world_size() : 1, earlier,
             state.position);
    }
  }

  void save_if_due(bool epoch_end) {
    if (checkpoints && checkpoints->should_save(state.step, epoch_end)) save();
  }

  std::string save() {
    if (!checkpoints) {
      throw ConfigError("rankwise: " + where() +
                        ": Fabric::save without a checkpoint directory; set "
                        "FabricOptions::checkpoint_dir (--checkpoint-dir)");
    }
    describe_run();
    return checkpoints->save(capture(state), state.step);  // collective
  }
};

// "auto", "cpu", "cuda" or "cuda:N" -> the device; ConfigError otherwise, or
// for cuda:N beyond the visible GPUs.
torch::Device resolve_device(const std::string& option) {
  const std::string error = device_option_error(option);
  if (!error.empty()) throw ConfigError("rankwise: " + error);
  if (option == "auto") return rankwise::device();
  if (option == "cpu") return torch::Device(torch::kCPU);
  if (option == "cuda") return rankwise::device(DeviceKind::kCuda);
  const auto index = std::stoll(option.substr(5));
  const auto visible = static_cast<long long>(torch::cuda::device_count());
  if (index >= visible) {
    const std::string choices =
        visible == 0 ? std::string("use auto or cpu")
                     : fmt::format("use cuda:0 to cuda:{} (CUDA_VISIBLE_DEVICES renumbers them "
                                   "from 0), auto or cpu",
                                   visible - 1);
    throw ConfigError(fmt::format("rankwise: device {}: this process sees {} GPU{}; {}", option,
                                  visible, visible == 1 ? "" : "s", choices));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int64_t LoaderHooks::epoch(FabricCore& core) { return core.state.epoch; }

std::pair<int64_t, int64_t> LoaderHooks::begin_training_pass(FabricCore& core) {
  core.ensure_resumed();
  if (core.state.position == 0 && core.state.epoch_stretches.empty()) {  // an epoch's start
    for (auto& [name, metrics] : core.state.metrics) metrics->reset();
  }
  return {core.state.epoch, core.state.position};
}

std::pair<int64_t, int64_t> LoaderHooks::next_training_pass(FabricCore& core) {
  core.ensure_resumed();
  return {core.state.epoch, core.state.position};
}

std::vector<DistributedSampler::Stretch> LoaderHooks::epoch_stretches(FabricCore& core) {
  return core.state.epoch_stretches;
}

void LoaderHooks::end_training_batch(FabricCore& core, int64_t end, int64_t shard_size) {
  // The batch's samples, padding duplicates included (they were computed).
  monitor::record_step(end - core.state.position, std::exchange(core.last_loss, std::nullopt));
  core.state.step += 1;
  core.state.position = end;
  if (end < shard_size) core.save_if_due(/*epoch_end=*/false);
}

void LoaderHooks::end_training_pass(FabricCore& core, int64_t epoch) {
  if (core.join) core.join();  // every rank, after its last batch
  core.state.epoch = epoch + 1;
  core.state.position = 0;
  core.state.epoch_stretches.clear();
}

torch::Device LoaderHooks::device(FabricCore& core) { return core.device; }

}  // namespace detail

std::string device_option_error(const std::string& value) {
  const bool cuda_n = value.size() > 5 && value.compare(0, 5, "cuda:") == 0 &&
                      value.size() <= 9 &&
                      value.find_first_not_of("0123456789", 5) == std::string::npos;
  if (value == "auto" || value == "cpu" || value == "cuda" || cuda_n) return "";
  return "'" + value + "' is not a device; use auto, cpu, cuda or cuda:N";
}

namespace {

FabricOptions parse_command_line(int argc, char** argv, FabricOptions options) {
  CLI::App app{"rankwise::Fabric options"};
  app.allow_extras();
  add_fabric_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    std::exit(exit_after_parse_error(app, help));  // printed on rank 0 only
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string("rankwise: ") + e.what() + " (run with --help for the options)");
  }
  return options;
}

}  // namespace

Fabric::Fabric(int argc, char** argv, FabricOptions defaults)
    : Fabric(parse_command_line(argc, argv, std::move(defaults))) {}

namespace {
std::atomic<int> live_fabrics{0};
}  // namespace

Fabric::Fabric(FabricOptions options) : core_(std::make_shared<detail::FabricCore>()) {
  if (live_fabrics.fetch_add(1) != 0) {
    live_fabrics.fetch_sub(1);
    throw ConfigError("rankwise: a Fabric already exists in this process; use one Fabric per "
                      "process at a time (destroy the first before creating another)");
  }
  try {
    start(std::move(options));
  } catch (...) {
    live_fabrics.fetch_sub(1);
    throw;
  }
}

void Fabric::start(FabricOptions options) {
  auto& core = *core_;
  core.options = std::move(options);
  const auto& o = core.options;
  if (o.keep_last() < 1) {
    throw ConfigError("rankwise: FabricOptions::keep_last is " + std::to_string(o.keep_last()) +
                      "; keep at least 1 checkpoint");
  }
  if (o.checkpoint_dir().empty() && (o.resume() != Resume::kNew || o.checkpoint_every() > 0)) {
    throw ConfigError(std::string("rankwise: ") +
                      (o.checkpoint_every() > 0 ? "checkpoint_every (--checkpoint-every)"
                                                : "a resume policy (--resume, --overwrite-checkpoints)") +
                      " without a checkpoint directory: set FabricOptions::checkpoint_dir "
                      "(--checkpoint-dir)");
  }
  if (o.checkpoint_every() < 0) {
    throw ConfigError("rankwise: FabricOptions::checkpoint_every is " +
                      std::to_string(o.checkpoint_every()) + "; use 0 (epoch ends only) or N > 0");
  }
  // Before init(): with device auto and a GPU per rank, init() picks NCCL;
  // training on the CPU needs only Gloo.
  core.device = detail::resolve_device(o.device());
  monitor::set_device(core.device.str());
  const std::string backend = o.backend() == "auto" && core.device.is_cpu() ? "gloo" : o.backend();
  auto& group = init(InitOptions()
                         .backend(backend)
                         .timeout(o.timeout())
                         .check_collectives(o.check_collectives()));
  group.set_check_collectives(o.check_collectives());  // also when init() had been called
  seed_everything(o.seed());
  if (o.print_header()) print_header();
  if (o.device() != "auto") print0("device {}: training on {}", o.device(), core.device.str());

  if (o.checkpoint_dir().empty()) return;
  // Collective: rank 0 creates the directory and locks it, so that a bad
  // path fails now rather than after an epoch of training.
  core.checkpoints = std::make_unique<CheckpointManager>(
      CheckpointManagerOptions(o.checkpoint_dir())
          .keep_last(o.keep_last())
          .every_n_steps(o.checkpoint_every()));
  if (o.resume() == Resume::kLatest) {
    // Rank 0's latest, on every rank (its bytes sent where a node does not see it).
    core.pending = core.checkpoints->load_latest_collective(
        &core.pending_path, CollectiveLoadOptions().node_local(o.checkpoint_node_local()));
    if (!core.pending) print0("no checkpoint in {}; starting from epoch 1", o.checkpoint_dir());
    return;
  }
  // Rank 0's view of the directory decides, so that every rank agrees.
  const auto earlier = broadcast_decision<int64_t>(
      static_cast<int64_t>(is_global_zero() ? core.checkpoints->checkpoints().size() : 0), 0);
  if (earlier == 0) return;
  if (o.resume() == Resume::kNew) {
    throw ConfigError("rankwise: checkpoint directory " + o.checkpoint_dir() +
                      " holds checkpoints of an earlier run; resume it (Resume::kLatest, "
                      "--resume), replace them (Resume::kOverwrite, --overwrite-checkpoints), or "
                      "choose another directory");
  }
  print0("removing {} checkpoint(s) of an earlier run from {}", earlier, o.checkpoint_dir());
  core.checkpoints->clear();  // collective
}

Fabric::~Fabric() { live_fabrics.fetch_sub(1); }

int Fabric::rank() const { return process_group().rank(); }
int Fabric::world_size() const { return process_group().world_size(); }
int Fabric::local_rank() const { return process_group().local_rank(); }
torch::Device Fabric::device() const { return core_->device; }
const FabricOptions& Fabric::options() const { return core_->options; }

void Fabric::register_model(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            std::function<void()> join) {
  auto& state = core_->state;
  if (state.model != nullptr) {
    throw ConfigError("rankwise: " + detail::where() +
                      ": Fabric::setup was called twice; one model and optimizer per Fabric");
  }
  state.model = &model;
  state.optimizer = &optimizer;
  try {
    for (const auto& group : optimizer.param_groups()) core_->initial_lrs.push_back(group.options().get_lr());
  } catch (const c10::Error&) {
    core_->initial_lrs.clear();  // an optimizer whose options have no lr: nothing to compare
  }
  core_->describe_run();
  core_->join = std::move(join);
  if (core_->options.seed_per_rank()) {
    torch::manual_seed(core_->options.seed() + static_cast<uint64_t>(rank()));
  }
}

void Fabric::check_batch_size(int64_t batch_size) {
  if (batch_size < 1) {
    throw ConfigError("rankwise: a Fabric data loader's batch size is " +
                      std::to_string(batch_size) + "; it must be at least 1");
  }
}

void Fabric::register_training_loader(int64_t dataset_size, int64_t batch_size) {
  check_batch_size(batch_size);
  if (dataset_size == 0) {
    throw ConfigError("rankwise: Fabric::setup_dataloader: the training dataset is empty "
                      "(size() is 0); there is nothing to train on");
  }
  auto& core = *core_;
  if (core.has_training_loader) {
    throw ConfigError("rankwise: Fabric::setup_dataloader was called twice; a Fabric has one "
                      "training loader (its position is checkpointed): use "
                      "setup_eval_dataloader for evaluation data");
  }
  core.has_training_loader = true;
  core.train_samples = dataset_size;
  core.batch_size = batch_size;
  core.describe_run();
}

void Fabric::track(torch::optim::LRScheduler& scheduler) { core_->state.lr_scheduler = &scheduler; }

void Fabric::track(const std::string& name, metrics::MetricCollection& metrics) {
  core_->state.metrics[name] = &metrics;
}

std::map<std::string, c10::IValue>& Fabric::extras() { return core_->state.extras; }

void Fabric::backward(const torch::Tensor& loss) {
  if (core_->state.model == nullptr) {
    throw Error("rankwise: " + detail::where() +
                ": Fabric::backward before Fabric::setup(model, optimizer): the gradients would "
                "not be averaged across ranks; call setup first and forward through the model "
                "it returns");
  }
  loss.backward();
  if (loss.device().is_cpu() && loss.numel() == 1) core_->last_loss = loss.item<double>();
}

Fabric::EpochRange Fabric::epochs(int64_t total) { return EpochRange(core_, total); }

int64_t Fabric::epoch() const { return core_->state.epoch; }
int64_t Fabric::step() const { return core_->state.step; }

std::string Fabric::save() { return core_->save(); }

void Fabric::load(const std::string& path) {
  core_->pending = rankwise::load_collective(
      path, CollectiveLoadOptions().node_local(core_->options.checkpoint_node_local()));
  core_->pending_path = path;
  core_->ensure_resumed();
}

void Fabric::all_reduce(torch::Tensor& tensor, ReduceOp op, std::source_location site) {
  process_group().all_reduce(tensor, op, site);
}

double Fabric::all_reduce(double value, ReduceOp op, std::source_location site) {
  auto tensor = torch::tensor({value}, torch::kFloat64);
  process_group().all_reduce(tensor, op, site);
  return tensor.item<double>();
}

std::vector<torch::Tensor> Fabric::all_gather(const torch::Tensor& tensor,
                                              std::source_location site) {
  return process_group().all_gather(tensor, site);
}

void Fabric::broadcast(torch::Tensor& tensor, int root, std::source_location site) {
  process_group().broadcast(tensor, root, site);
}

void Fabric::barrier(std::source_location site) { process_group().barrier(site); }

void Fabric::monitored_barrier(const std::string& name, std::chrono::milliseconds timeout,
                               bool wait_all_ranks, std::source_location site) {
  process_group().monitored_barrier(name, timeout, wait_all_ranks, site);
}

Fabric::EpochRange::Iterator Fabric::EpochRange::begin() {
  core_->ensure_resumed();
  Iterator it(core_.get(), total_);
  it.current_ = core_->state.epoch;
  if (core_->resumed && it.current_ >= total_) {
    const auto& state = core_->state;
    const std::string at =
        state.position == 0
            ? fmt::format("at the end of epoch {}", state.epoch)
            : fmt::format("{} samples into epoch {} on each rank", state.position, state.epoch + 1);
    rankwise::print0("nothing left to do: the checkpoint is {} and the run's total is {} epoch{}; "
                     "raise the total to train further",
                     at, total_, total_ == 1 ? "" : "s");
  }
  return it;
}

Fabric::EpochRange::Iterator& Fabric::EpochRange::Iterator::operator++() {
  auto& state = core_->state;
  if (state.epoch == current_) {  // the training loader did not finish this epoch
    state.epoch = current_ + 1;
    state.position = 0;
  } else if (state.epoch > current_ + 1 && !core_->warned_passes) {
    core_->warned_passes = true;
    detail::write_line(STDERR_FILENO,
                       fmt::format("rankwise: warning: the training loader made {} passes in the "
                                   "body of epoch {} of Fabric::epochs(); each pass is an epoch, "
                                   "so the run skips to epoch {} (this warning is shown once)",
                                   state.epoch - current_, current_ + 1, state.epoch + 1));
  }
  core_->save_if_due(/*epoch_end=*/true);
  current_ = state.epoch;
  return *this;
}

bool Fabric::EpochRange::Iterator::operator==(const Iterator& other) const {
  const bool done = core_ == nullptr || current_ >= total_;
  const bool other_done = other.core_ == nullptr || other.current_ >= other.total_;
  return done == other_done;
}

}  // namespace rankwise
