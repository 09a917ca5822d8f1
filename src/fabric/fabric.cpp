#include "rankwise/fabric.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "compat/autocast.h"
#include "compat/gloo_bfloat16.h"
#include "core/check.h"
#include "fabric/command_line.h"
#include "fabric/fabric_core.h"
#include "fabric/precision.h"
#include "rankwise/dist/consensus.h"
#include "rankwise/error.h"
#include "rankwise/monitor/job_header.h"
#include "rankwise/monitor/step_stats.h"
#include "rankwise/monitor/throughput.h"
#include "rankwise/seed.h"
#include "util/io.h"

namespace rankwise {

Fabric::Fabric(int& argc, char** argv, FabricOptions defaults)
    : core_(std::make_shared<fabric::FabricCore>()) {
  auto options = fabric::parse_command_line(argc, argv, std::move(defaults));
  if (!options) {
    core_->help_only = true;  // the program's parser prints its flags, or setup() exits
    return;
  }
  claim_and_start(std::move(*options));
}

namespace {
std::atomic<int> live_fabrics{0};
}  // namespace

Fabric::Fabric(FabricOptions options) : core_(std::make_shared<fabric::FabricCore>()) {
  claim_and_start(std::move(options));
}

void Fabric::claim_and_start(FabricOptions options) {
  if (live_fabrics.fetch_add(1) != 0) {
    live_fabrics.fetch_sub(1);
    core::raise<ConfigError>(
        "a Fabric already exists in this process; use one Fabric per process at a time (destroy "
        "the first before creating another)");
  }
  try {
    start(std::move(options));
  } catch (...) {
    live_fabrics.fetch_sub(1);
    throw;
  }
}

namespace {
// FabricOptions::metrics_dir: rank 0 creates it now, so that a bad path fails
// before training; the log itself opens at its first record (FabricCore::log).
void create_metrics_dir(const fabric::FabricCore& core) {
  const std::filesystem::path dir(core.options.metrics_dir());
  std::error_code error;
  if (dir.empty() || !is_rank_zero() || std::filesystem::create_directories(dir, error) || !error) return;
  core::raise<ConfigError>("FabricOptions::metrics_dir {}: cannot create it ({}); choose a "
                           "directory this user can write",
                           dir.string(), error.message());
}

// With a checkpoint directory: the CheckpointManager (collective: rank 0
// creates and locks the directory, so that a bad path fails now rather than
// after an epoch of training) and the resume policy.
void open_checkpoints(fabric::FabricCore& core) {
  const auto& o = core.options;
  core.checkpoints = fabric::open_checkpoint_store(o, core.strategy->sharded_checkpoints());
  // Rank 0's view of the directory decides, so that every rank agrees.
  const auto earlier = core.checkpoints->count();
  if (earlier.mine == 0 && earlier.other_kind > 0 && o.resume() != Resume::kOverwrite) {
    const bool sharded = core.strategy->sharded_checkpoints();
    core::raise<ConfigError>(
        "checkpoint directory {} holds {} {} checkpoint(s), which strategy {} does not read (ddp "
        "writes replicated checkpoints, zero1 and fsdp sharded ones); {} with the strategy that "
        "wrote them, replace them (--overwrite-checkpoints), or choose another directory",
        o.checkpoint_dir(), earlier.other_kind, sharded ? "replicated" : "sharded", o.strategy(),
        o.resume() == Resume::kLatest ? "resume them" : "continue that run");
  }
  if (o.resume() == Resume::kLatest) {
    core.pending = core.checkpoints->latest(core.pending_path);  // rank 0's, on every rank
    if (!core.pending) print0("no checkpoint in {}; starting from epoch 1", o.checkpoint_dir());
    return;
  }
  if (earlier.mine + earlier.other_kind == 0) return;
  if (o.resume() == Resume::kNew) {
    core::raise<ConfigError>(
        "checkpoint directory {} holds checkpoints of an earlier run; resume it (Resume::kLatest, "
        "--resume), replace them (Resume::kOverwrite, --overwrite-checkpoints), or choose another "
        "directory",
        o.checkpoint_dir());
  }
  print0("removing {} checkpoint(s) of an earlier run from {}", earlier.mine + earlier.other_kind, o.checkpoint_dir());
  core.checkpoints->clear();  // collective
}
}  // namespace

void Fabric::start(FabricOptions options) {
  auto& core = *core_;
  core.options = std::move(options);
  const auto& o = core.options;
  if (o.keep_last() < 1) {
    core::raise<ConfigError>("FabricOptions::keep_last is {}; keep at least 1 checkpoint",
                             o.keep_last());
  }
  if (o.checkpoint_dir().empty() &&
      (o.resume() != Resume::kNew || o.checkpoint_every() > 0 || o.checkpoint_async())) {
    core::raise<ConfigError>(
        "{} without a checkpoint directory: set FabricOptions::checkpoint_dir (--checkpoint-dir)",
        (o.checkpoint_every() > 0 ? "checkpoint_every (--checkpoint-every)"
         : o.checkpoint_async()   ? "checkpoint_async (--checkpoint-async)"
                                  : "a resume policy (--resume, --overwrite-checkpoints)"));
  }
  if (o.accumulate() < 1) {
    core::raise<ConfigError>(
        "FabricOptions::accumulate is {}; use 1 (no accumulation) or the number of batches whose "
        "gradients the optimizer's step takes (N > 1)",
        o.accumulate());
  }
  if (o.checkpoint_every() < 0) {
    core::raise<ConfigError>(
        "FabricOptions::checkpoint_every is {}; use 0 (epoch ends only) or N > 0",
        o.checkpoint_every());
  }
  if (const std::string error = precision_option_error(o.precision()); !error.empty()) {
    core::raise<ConfigError>("FabricOptions::precision: {}", error);
  }
  core.strategy = fabric::make_strategy(o);  // ConfigError for an unknown one
  if (core.strategy->shards_parameters()) core.options.fsdp(fabric::fsdp_options_for(o));
  // Before init(): with device auto and a GPU per rank, init() picks NCCL;
  // training on the CPU needs only Gloo.
  core.device = fabric::resolve_device(o.device());
  fabric::check_precision_support(o, core.device);
  monitor::set_device(core.device.str());
  const std::string backend = o.backend() == "auto" && core.device.is_cpu() ? "gloo" : o.backend();
  if (core.true_dtype() && backend == "gloo" && !compat::kGlooCommunicatesBfloat16) {
    core::raise<ConfigError>(
        "precision bf16-true: this libtorch's ({}) Gloo backend cannot broadcast or all_reduce "
        "bfloat16, which DDP would do with a bfloat16 model; use bf16-mixed (float32 parameters, "
        "bfloat16 compute), or NCCL on GPUs",
        TORCH_VERSION);
  }
  auto& group = init(dist::InitOptions()
                         .backend(backend)
                         .timeout(o.timeout())
                         .check_collectives(o.check_collectives()));
  group.set_check_collectives(o.check_collectives());  // also when init() had been called
  seed_everything(o.seed());
  // float16 (16-mixed) needs loss scaling.
  if (o.precision() == "16-mixed") core.scaler = std::make_unique<amp::GradScaler>();
  if (o.print_header()) monitor::print_header();
  if (o.device() != "auto") print0("device {}: training on {}", o.device(), core.device.str());
  core.meter.open(o.progress());
  if (!o.checkpoint_dir().empty()) open_checkpoints(core);
  create_metrics_dir(core);
}

Fabric::~Fabric() {
  if (!core_->help_only) live_fabrics.fetch_sub(1);
}

int Fabric::rank() const {
  core_->exit_if_help_only();
  return dist::process_group().rank();
}
int Fabric::world_size() const {
  core_->exit_if_help_only();
  return dist::process_group().world_size();
}
int Fabric::local_rank() const {
  core_->exit_if_help_only();
  return dist::process_group().local_rank();
}
torch::Device Fabric::device() const {
  core_->exit_if_help_only();
  return core_->device;
}
const FabricOptions& Fabric::options() const { return core_->options; }

namespace {
// FLOPs per training sample for MFU: the option's, else counted for a model
// of Linear layers (0: unknown, with a note when a metrics log would miss it).
double flops_per_sample(const FabricOptions& options, const torch::nn::Module& model) {
  if (options.flops_per_sample() > 0) return options.flops_per_sample();
  try {
    return monitor::training_flops_per_sample(model);
  } catch (const ConfigError& error) {
    if (!options.metrics_dir().empty()) {  // a layer it cannot count: no MFU (docs/fabric.md)
      const std::string why = error.what();  // from "cannot count", without the rank prefix
      print0("note: the metrics log will have no MFU: {}", why.substr(std::min(why.find("cannot"), why.size())));
    }
    return 0;
  }
}
}  // namespace

bool Fabric::shards_parameters() const {
  core_->exit_if_help_only();
  return core_->strategy->shards_parameters();
}

void Fabric::refuse_setup_with_optimizer() const {
  if (!shards_parameters()) return;
  core::raise<ConfigError>(
      core::here(),
      "Fabric::setup(model, optimizer) under strategy {}: the optimizer must be built over this "
      "rank's shards of the parameters, which exist only once the model is wrapped; call "
      "`auto model = fabric.setup_module(net);`, build the optimizer over model.parameters(), then "
      "call fabric.setup_optimizers(optimizer)",
      core_->strategy->name());
}

void Fabric::place_model(torch::nn::Module& model) {
  core_->exit_if_help_only();
  if (core_->strategy->has_model()) {
    core::raise<ConfigError>(core::here(),
                             "Fabric::setup (or setup_module) was called twice; one model and "
                             "optimizer per Fabric");
  }
  model.to(core_->device);
  if (const auto dtype = core_->true_dtype()) model.to(*dtype);
  // Before a strategy shards the parameters.
  core_->meter.set_flops(flops_per_sample(core_->options, model), core_->options.peak_flops());
}

void Fabric::register_module(fabric::WrappedModel model) {
  core_->strategy->set_model(std::move(model));
  if (core_->options.seed_per_rank()) {
    torch::manual_seed(core_->options.seed() + static_cast<uint64_t>(rank()));
  }
}

void Fabric::setup_optimizers(torch::optim::Optimizer& optimizer) {
  core_->exit_if_help_only();
  auto& strategy = *core_->strategy;
  RANKWISE_CHECK(strategy.has_model(), ConfigError, core::here(),
                 "Fabric::setup_optimizers before Fabric::setup_module: call `auto model = "
                 "fabric.setup_module(net);` first and build the optimizer over model.parameters()");
  RANKWISE_CHECK(!strategy.has_optimizer(), ConfigError, core::here(),
                 "Fabric::setup_optimizers was called twice (setup() calls it); one optimizer per Fabric");
  strategy.set_optimizer(optimizer);  // collective under zero1; checks it under fsdp
  core_->identity.record_learning_rates(optimizer);
  core_->describe_run();
}

void Fabric::check_batch_size(int64_t batch_size) {
  if (batch_size < 1) {
    core::raise<ConfigError>("a Fabric data loader's batch size is {}; it must be at least 1",
                             batch_size);
  }
}

void Fabric::register_training_loader(int64_t dataset_size, int64_t batch_size) {
  core_->exit_if_help_only();
  check_batch_size(batch_size);
  if (dataset_size == 0) {
    core::raise<ConfigError>(
        "Fabric::setup_dataloader: the training dataset is empty (size() is 0); there is nothing "
        "to train on");
  }
  auto& core = *core_;
  auto& identity = core.identity;
  if (identity.has_training_loader) {
    core::raise<ConfigError>(
        "Fabric::setup_dataloader was called twice; a Fabric has one training loader (its position "
        "is checkpointed): use setup_eval_dataloader for evaluation data");
  }
  identity.has_training_loader = true;
  identity.train_samples = dataset_size;
  identity.batch_size = batch_size;
  core.describe_run();
}

namespace {
// What track() adds is restored when training starts (or at load()): after
// that, it would be saved but never restored.
void refuse_late_track(const fabric::FabricCore& core, const std::string& what) {
  if (!core.started) return;
  core::raise<ConfigError>(core::here(),
                           "Fabric::track({}) after training started (or after Fabric::load): a "
                           "resumed run would not restore it; call track() before the training "
                           "loop (Fabric::epochs, the first batch) and before load()",
                           what);
}
}  // namespace

void Fabric::track(torch::optim::LRScheduler& scheduler) {
  refuse_late_track(*core_, "scheduler");
  core_->state.lr_scheduler = &scheduler;
}

void Fabric::track(const std::string& name, metrics::MetricCollection& metrics) {
  refuse_late_track(*core_, "\"" + name + "\", metrics");
  core_->state.metrics[name] = &metrics;
}

std::map<std::string, c10::IValue>& Fabric::extras() { return core_->state.extras; }

namespace {
// `what` needs the model (and with `optimizer`, the optimizer) set up.
void require_setup(const fabric::FabricCore& core, const char* what, const char* why, bool optimizer = false) {
  const auto& strategy = *core.strategy;
  if (strategy.has_model() && (!optimizer || strategy.has_optimizer())) return;
  core::raise<Error>(core::here(),
                     "Fabric::{} before Fabric::{}: {}; call setup(model, optimizer), or "
                     "setup_module(model) and setup_optimizers(optimizer), first and forward "
                     "through the model they return",
                     what, strategy.has_model() ? "setup_optimizers" : "setup", why);
}
}  // namespace

void Fabric::backward(const torch::Tensor& loss, std::source_location site) {
  const dist::CallerSite caller(site);
  require_setup(*core_, "backward", "the gradients would not be averaged across ranks");
  auto& core = *core_;
  torch::Tensor objective = loss;
  if (core.accumulation.weighs() && core.batch_in_flight) objective = loss * core.accumulation.weight();
  if (core.scaler) objective = core.scaler->scale(objective);
  {
    // Backward outside the batch's autocast, as PyTorch recommends.
    std::optional<compat::AutocastGuard> no_autocast;
    if (core.autocast_dtype()) no_autocast.emplace(core.device.type(), std::nullopt);
    objective.backward();
  }
  core.strategy->after_backward();
  if (loss.device().is_cpu() && loss.numel() == 1) core_->last_loss = loss.item<double>();
  if (core.batch_in_flight) core.meter.set_batch_loss(loss.detach());  // the progress's loss
}

bool Fabric::optimizer_step(std::source_location site) {
  const dist::CallerSite caller(site);
  require_setup(*core_, "optimizer_step", "there is no optimizer to step", /*optimizer=*/true);
  if (is_accumulating()) return false;
  auto& core = *core_;
  const bool stepped = core.strategy->step(core.scaler.get());  // and zero_grad()
  if (core.scaler) core.scaler->update();
  // The batch's autocast cached casts of the parameters the step changed.
  if (core.autocast_dtype()) compat::clear_autocast_cache();
  return stepped;
}

torch::Tensor Fabric::clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                                     std::source_location site) {
  const dist::CallerSite caller(site);
  require_setup(*core_, "clip_gradients", "there are no gradients to clip", /*optimizer=*/core_->scaler != nullptr);
  RANKWISE_CHECK(!is_accumulating(), Error, core::here(),
                 "Fabric::clip_gradients in a batch that accumulates: its gradients are this "
                 "rank's partial sums, not yet averaged across ranks{}; call it at the group's "
                 "end (if (!fabric.is_accumulating()))",
                 core_->scaler ? ", and scaled (unscaled once per optimizer step)" : "");
  return core_->strategy->clip_gradients(max_norm, norm_type, error_if_nonfinite, core_->scaler.get());
}

amp::GradScaler* Fabric::grad_scaler() { return core_->scaler.get(); }

bool Fabric::is_accumulating() const {
  return core_->batch_in_flight.has_value() && !core_->accumulation.boundary();
}

Fabric::EpochRange Fabric::epochs(int64_t total, std::source_location site) {
  core_->exit_if_help_only();
  return EpochRange(core_, total, site);
}

int64_t Fabric::epoch() const { return core_->state.epoch; }
int64_t Fabric::step() const { return core_->state.step; }

void Fabric::log(const std::string& name, double value) { log_dict({{name, value}}); }

void Fabric::log_dict(const monitor::MetricValues& values) {
  if (auto* log = core_->log()) log->log_step(step(), core_->loop_epoch.value_or(epoch()) + 1, values);
}

void Fabric::log_hyperparams(const monitor::RunConfig& values) {
  RANKWISE_CHECK(!core_->run_log.is_open(), ConfigError, core::here(),
                 "Fabric::log_hyperparams after the metrics log's first record: its config "
                 "record is written; call it before training (before log(), log_dict() and "
                 "the first training batch)");
  auto& mine = core_->run_log.hyperparameters;
  mine.insert(mine.end(), values.begin(), values.end());
}

void Fabric::log_epoch(const monitor::MetricValues& values) {
  auto* log = core_->log();
  if (log == nullptr) return;
  const double per_second = core_->throughput().epoch_samples_per_s;
  // state.epoch counts the finished epochs: the last one's 1-based number
  log->log_epoch(std::max<int64_t>(core_->state.epoch, 1), step(), values,
                 std::isfinite(per_second) ? std::optional<double>(per_second) : std::nullopt);
}

fabric::Throughput Fabric::throughput() { return core_->throughput(); }

monitor::MetricsLog* Fabric::metrics_log() { return core_->log(); }

std::string Fabric::save(std::source_location site) {
  const dist::CallerSite caller(site);
  require_setup(*core_, "save", "the checkpoint would hold no model or optimizer to resume",
                /*optimizer=*/true);
  core_->schedule.note_pending_gradients(core_->state.step, core_->accumulating_now(),
                                         "Fabric::save() was called between optimizer steps");
  return core_->save_explicit();
}

void Fabric::load(const std::string& path, std::source_location site) {
  const dist::CallerSite caller(site);
  core_->exit_if_help_only();
  core_->pending = fabric::checkpoint_at(path, core_->options, core_->strategy->sharded_checkpoints());
  core_->pending_path = path;
  core_->ensure_resumed();
}

Fabric::EpochRange::Iterator Fabric::EpochRange::begin() {
  const dist::CallerSite caller(site_);
  core_->ensure_resumed();
  Iterator it(core_.get(), total_, site_);
  it.current_ = core_->state.epoch;
  core_->total_epochs = total_;
  core_->loop_epoch = it.current_;
  if (core_->checkpoints && it.current_ < total_) {
    core_->preemption.arm(core_->options.progress().every_n_steps());
  }
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
  const dist::CallerSite caller(site_);
  auto& state = core_->state;
  if (state.epoch == current_) {  // the training loader did not finish this epoch
    core_->end_progress();
    state.epoch = current_ + 1;
    state.position = 0;
  } else if (state.epoch > current_ + 1 && !core_->warned_passes) {
    core_->warned_passes = true;
    util::write_line(
        STDERR_FILENO,
        core::message("warning: the training loader made {} passes in the body of epoch {} of "
                      "Fabric::epochs(); each pass is an epoch, so the run skips to epoch {} (this "
                      "warning is shown once)",
                      state.epoch - current_, current_ + 1, state.epoch + 1));
  }
  core_->save_if_due(/*epoch_end=*/true, /*run_end=*/state.epoch >= total_);
  if (core_->preemption.check_now()) core_->exit_preempted();
  if (state.epoch >= total_) {
    core_->finish_saves();
    core_->preemption.disarm();
  }
  current_ = state.epoch;
  core_->loop_epoch = current_ < total_ ? std::optional<int64_t>(current_) : std::nullopt;
  return *this;
}

bool Fabric::EpochRange::Iterator::operator==(const Iterator& other) const {
  const bool done = core_ == nullptr || current_ >= total_;
  const bool other_done = other.core_ == nullptr || other.current_ >= other.total_;
  return done == other_done;
}

}  // namespace rankwise
