#pragma once
// The state a Fabric shares with its loaders (FabricLoader reaches it
// through LoaderHooks): options, device, the training state, the checkpoint
// manager, and the run's identity checks.
#include "rankwise/fabric.h"

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "compat/autocast.h"
#include "core/check.h"
#include "util/io.h"
#include "rankwise/amp/grad_scaler.h"
#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/training_state.h"
#include "rankwise/dist/consensus.h"
#include "rankwise/device.h"
#include "rankwise/error.h"
#include "rankwise/fabric/cli.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/monitor/progress_bar.h"
#include "rankwise/monitor/step_stats.h"
#include "rankwise/monitor/throughput.h"
#include "rankwise/seed.h"

namespace rankwise::fabric {

// Keys of TrainingState::extras that identify the run.
constexpr const char* kTrainSamplesKey = "fabric.train_samples";
constexpr const char* kBatchSizeKey = "fabric.batch_size";
constexpr const char* kSeedKey = "fabric.seed";
constexpr const char* kInitialLrKey = "fabric.initial_lr";
constexpr const char* kAccumulateKey = "fabric.accumulate";
constexpr const char* kPrecisionKey = "fabric.precision";
// The GradScaler's state_dict() under precision 16-mixed (Python's layout).
constexpr const char* kGradScalerKey = "fabric.grad_scaler";

// Gradient accumulation as a policy (FabricOptions::accumulate): where the
// training batch in flight stands in its group of micro-batches.
struct AccumulationGroup {
  int64_t done = 0;       // micro-batches of the group already trained
  int64_t size = 1;       // micro-batches in the group (fewer at a pass's end)
  int64_t samples = 0;    // samples of the group's batches so far
  int64_t total_samples = 1;  // samples of all the group's batches
  double weight = 1.0;    // the batch in flight's share of them: its loss's factor
  bool boundary = true;   // the batch in flight ends the group: the optimizer steps
  std::shared_ptr<void> no_sync;  // held while a batch that does not end it runs
};

// Everything a Fabric and its loaders share.
class FabricCore {
 public:
  FabricOptions options;
  torch::Device device{torch::kCPU};
  std::unique_ptr<checkpoint::CheckpointManager> checkpoints;
  // With FabricOptions::metrics_dir: opened at its first record (log()).
  std::unique_ptr<monitor::MetricsLog> metrics_log;
  monitor::RunConfig hyperparameters;  // Fabric::log_hyperparams(), for its config record
  std::optional<checkpoint::Checkpoint> pending;  // loaded, restored when training starts
  std::string pending_path;
  bool resumed = false;  // a checkpoint was restored
  checkpoint::TrainingState state;
  ModelHooks model_hooks;  // of the DDP model setup() wrapped
  AccumulationGroup group;
  // The step at which a scheduled checkpoint fell mid-accumulation and was
  // deferred to the next batch that ends synchronized; -1: none pending.
  int64_t deferred_since = -1;
  bool noted_deferral = false;
  bool noted_pending = false;
  // Milliseconds saves blocked and waited for an asynchronous save, since the
  // last step record (its checkpoint_blocked_ms and checkpoint_waited_ms).
  double save_blocked_ms = 0;
  double save_waited_ms = 0;
  bool saved_since_record = false;
  // The end position of the training batch the loop body holds, if any.
  std::optional<int64_t> batch_in_flight;
  // Built by Fabric(argc, argv) with --help: nothing started; using it exits.
  bool help_only = false;
  bool has_training_loader = false;
  bool warned_passes = false;
  int64_t train_samples = 0;
  int64_t batch_size = 0;
  std::vector<double> initial_lrs;  // each param_group's lr at setup()
  // The last loss given to backward() when it is a one-element CPU tensor
  // (reading a CUDA loss would wait for the GPU): the heartbeat's loss.
  std::optional<double> last_loss;
  // Loss scaling under precision 16-mixed; null otherwise.
  std::unique_ptr<amp::GradScaler> scaler;
  // The training loader's progress (FabricOptions::progress), its epoch
  // started and not yet ended; the last loss backward() saw (detached, on
  // its device); the run's total epochs (Fabric::epochs), 0 before.
  std::unique_ptr<monitor::ProgressBar> progress;
  bool progress_open = false;
  torch::Tensor batch_loss;
  int64_t total_epochs = 0;
  // For MFU: FLOPs per training sample (0: unknown) and one device's peak
  // FLOP/s (0: not yet resolved).
  double flops_per_sample = 0;
  double peak = 0;
  bool warned_mfu = false;
  // The epoch of Fabric::epochs()'s loop body, while one runs: log()'s epoch.
  std::optional<int64_t> loop_epoch;

  // The dtype a mixed precision autocasts to (FabricOptions::precision).
  std::optional<c10::ScalarType> autocast_dtype() const {
    if (options.precision() == "bf16-mixed") return torch::kBFloat16;
    if (options.precision() == "16-mixed") return torch::kHalf;
    return std::nullopt;
  }
  // The dtype of the parameters and floating-point batches under bf16-true.
  std::optional<c10::ScalarType> true_dtype() const {
    if (options.precision() == "bf16-true") return torch::kBFloat16;
    return std::nullopt;
  }

  void describe_run() {
    if (has_training_loader) {
      state.extras[kTrainSamplesKey] = train_samples;
      state.extras[kBatchSizeKey] = batch_size;
    }
    state.extras[kSeedKey] = static_cast<int64_t>(options.seed());
    state.extras[kAccumulateKey] = options.accumulate();
    state.extras[kPrecisionKey] = options.precision();
    if (scaler) {
      state.extras[kGradScalerKey] = scaler->state_dict();
    } else {
      state.extras.erase(kGradScalerKey);
    }
    if (!initial_lrs.empty()) state.extras[kInitialLrKey] = c10::List<double>(initial_lrs);
  }

  // Under 16-mixed, the checkpoint's GradScaler state, so that a resume
  // continues with the scale an uninterrupted run has.
  void restore_scaler(const std::map<std::string, c10::IValue>& saved) {
    if (!scaler) return;
    const auto it = saved.find(kGradScalerKey);
    if (it != saved.end()) {
      scaler->load_state_dict(it->second);
    } else {
      print0("note: the checkpoint holds no GradScaler state (its run did not use precision "
             "16-mixed); loss scaling starts anew at scale {}",
             scaler->get_scale());
    }
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
    const auto accumulate = value(kAccumulateKey).value_or(1);
    const auto precision = saved.find(kPrecisionKey);
    const std::string saved_precision =
        precision != saved.end() && precision->second.isString() ? precision->second.toStringRef()
                                                                 : "32-true";
    if (saved_precision != options.precision()) {
      print0("note: resuming with precision {} (the checkpoint's run used {}): the run will not "
             "match an uninterrupted one",
             options.precision(), saved_precision);
    }
    if (accumulate != options.accumulate()) {
      print0("note: resuming with accumulate {} (the checkpoint's run used {}): step() counts "
             "optimizer steps, so the run will not match an uninterrupted one",
             options.accumulate(), accumulate);
    }
    if (samples && *samples != train_samples) {
      core::raise<ConfigError>(core::here(),
                               "{} was written by a run on {} training samples and this run's "
                               "training loader has {}: resume with the same data, or start a new "
                               "run in another checkpoint directory (or overwrite this one)",
                               path, *samples, train_samples);
    }
    if (state.position > 0 && batch && *batch != batch_size) {
      core::raise<ConfigError>(
          core::here(),
          "{} was written in the middle of an epoch with batch size {}; this run has {}: resume "
          "mid-epoch with the same batch size (or from an epoch-end checkpoint)",
          path, *batch, batch_size);
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
      core::raise<ConfigError>(
          core::here(),
          "a checkpoint ({}) is to be resumed but no model was set up: call Fabric::setup(model, "
          "optimizer) (and setup_dataloader, track) before the training loop",
          pending_path);
    }
    checkpoint::Checkpoint checkpoint = std::move(*pending);
    pending.reset();
    restore(checkpoint, state);
    check_same_run(state.extras, pending_path);
    restore_scaler(state.extras);
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
             rankwise::dist::is_initialized() ? rankwise::dist::world_size() : 1, earlier,
             state.position);
    }
  }

  // The precision's compute dtype: what MFU's peak is measured in.
  c10::ScalarType compute_dtype() const {
    return autocast_dtype().value_or(true_dtype().value_or(torch::kFloat32));
  }

  // One device's peak FLOP/s, once, at the first training pass on every
  // rank (collective: every rank begins its passes alike): rank 0's value,
  // measured on the CPU while every rank measures (0.1 s), so that each
  // process gets its share of the cores and the epoch's clock has not started.
  void resolve_peak() {
    if (peak > 0 || flops_per_sample <= 0) return;
    if (options.peak_flops() > 0) {
      peak = options.peak_flops();
      return;
    }
    peak = monitor::peak_flops(device, compute_dtype(), std::chrono::milliseconds(100));
    if (dist::is_initialized()) peak = dist::broadcast_decision(peak, 0);
  }

  fabric::Throughput throughput() {
    fabric::Throughput t;
    if (progress) {
      t.samples_per_s = progress->samples_per_second();
      t.epoch_samples_per_s = progress->epoch_samples_per_second();
    }
    if (flops_per_sample <= 0) return t;
    t.flops_per_sample = flops_per_sample;
    if (std::isfinite(t.samples_per_s) && peak > 0) {
      const int world = dist::is_initialized() ? dist::world_size() : 1;
      t.mfu = t.samples_per_s * flops_per_sample / (world * peak);
      warn_if_mfu_above_one(*t.mfu);
    }
    return t;
  }

  // A new run (not a resume) in a directory with an earlier run's metrics
  // replaces them, with a note (rank 0): its log, CSV and TensorBoard event
  // files, so that TensorBoard does not show two runs as one.
  static void remove_earlier_metrics(const std::filesystem::path& dir) {
    if (!is_rank_zero()) return;
    std::error_code error;
    int removed = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (name != "metrics.jsonl" && name != "metrics.csv" && name.rfind("events.out.tfevents.", 0) != 0) continue;
      std::error_code ignored;
      removed += std::filesystem::remove(entry.path(), ignored) ? 1 : 0;
    }
    if (removed > 0) {
      print0("note: {} held an earlier run's metrics; this new run replaces them ({} file{}: the "
             "metrics log, CSV and TensorBoard events); --resume appends instead",
             dir.string(), removed, removed == 1 ? "" : "s");
    }
  }

  // The run's metrics log, opened at the first call (null without a
  // metrics_dir): its config record holds the program, the run's settings,
  // the training loader's sizes and log_hyperparams()'s entries.
  monitor::MetricsLog* log() {
    if (metrics_log || options.metrics_dir().empty()) return metrics_log.get();
    const std::filesystem::path dir(options.metrics_dir());
    if (options.resume() != Resume::kLatest) remove_earlier_metrics(dir);
    std::error_code error;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
    monitor::RunConfig config{{"program", error ? std::string("run") : exe.filename().string()},
                              {"device", device.str()},
                              {"seed", static_cast<int64_t>(options.seed())},
                              {"accumulate", options.accumulate()},
                              {"precision", options.precision()},
                              {"checkpoint_dir", options.checkpoint_dir()}};
    if (has_training_loader) {
      config.emplace_back("train_samples", train_samples);
      config.emplace_back("batch_size_per_rank", batch_size);
    }
    if (flops_per_sample > 0) config.emplace_back("flops_per_sample", flops_per_sample);
    config.insert(config.end(), hyperparameters.begin(), hyperparameters.end());
    metrics_log = std::make_unique<monitor::MetricsLog>(
        monitor::MetricsLogOptions((dir / "metrics.jsonl").string())
            .append(options.resume() == Resume::kLatest)
            .csv_path((dir / "metrics.csv").string())
            .tensorboard_dir(dir.string()),
        config);
    return metrics_log.get();
  }

  // An MFU above 1 means a wrong FLOPs per sample or peak: say so once.
  void warn_if_mfu_above_one(double mfu) {
    if (mfu <= 1 || warned_mfu) return;
    warned_mfu = true;
    print0("warning: MFU is {:.3g}, above 1: the FLOPs per sample ({:.4g}) or one device's peak "
           "({:.4g} FLOP/s) is off; give --peak-flops in FLOP/s (989e12, not 989) and "
           "--flops-per-sample for one training sample, forward and backward (this warning is "
           "shown once)",
           mfu, flops_per_sample, peak);
  }

  // After a progress reduction (every rank): the step record of the metrics log.
  void log_progress() {
    auto* metrics_log = log();
    if (!metrics_log || !metrics_log->writing()) return;
    monitor::MetricValues values{{"loss", progress->loss()}};
    const auto t = throughput();
    if (t.mfu) values.emplace_back("mfu", *t.mfu);
    if (saved_since_record) {
      values.emplace_back("checkpoint_blocked_ms", std::exchange(save_blocked_ms, 0.0));
      values.emplace_back("checkpoint_waited_ms", std::exchange(save_waited_ms, 0.0));
      saved_since_record = false;
    }
    metrics_log->log_step(state.step, state.epoch + 1, values, t.samples_per_s,
                          progress->rank_stats());
  }

  // A training pass of `total` batches, `done` of them already, starts.
  void start_progress(int64_t total, int64_t done) {
    if (!progress) return;
    resolve_peak();  // MFU's peak, before the epoch's clock starts
    progress->start_epoch(state.epoch + 1, std::max(total_epochs, state.epoch + 1), total, done);
    progress_open = true;
  }

  // A training batch of `real_samples` (padding not counted) finished.
  void update_progress(int64_t real_samples) {
    if (!progress_open) return;
    if (progress->update(real_samples, std::exchange(batch_loss, torch::Tensor()))) log_progress();
  }

  // The epoch's training ends (every rank): the steps since the last reduction.
  void end_progress() {
    if (!progress_open) return;
    progress_open = false;
    if (progress->end_epoch()) log_progress();
  }

  // After --help, once the program's own parser (if any) has had its turn.
  void exit_if_help_only() const {
    if (help_only) std::exit(0);
  }

  // True while the DDP model holds gradients accumulated under no_sync().
  bool accumulating_now() const { return model_hooks.accumulating && model_hooks.accumulating(); }

  // A training batch [start, end) of a shard of `shard_size` starts: under
  // FabricOptions::accumulate, it runs under no_sync() unless it ends its group.
  void begin_accumulation_batch(int64_t start, int64_t end, int64_t shard_size) {
    group.no_sync.reset();
    if (group.done == 0) group.samples = 0;
    const int64_t n = options.accumulate();
    if (n == 1) return;
    const int64_t batch = end - start;  // every batch of a pass is full but its last
    if (group.done == 0) {
      group.size = std::min(n, (shard_size - start + batch - 1) / batch);
      group.total_samples = std::min(n * batch, shard_size - start);
    }
    group.weight = static_cast<double>(batch) / static_cast<double>(group.total_samples);
    group.boundary = group.done + 1 >= group.size;
    if (!group.boundary && model_hooks.no_sync) group.no_sync = model_hooks.no_sync();
  }

  // The batch of `samples` finished; returns whether it ended its group
  // (the step counts optimizer steps under FabricOptions::accumulate).
  bool end_accumulation_batch(int64_t samples) {
    group.no_sync.reset();
    group.samples += samples;
    if (!group.boundary) {
      group.done += 1;
      return false;
    }
    group.done = 0;
    return true;
  }

  void reset_accumulation() {
    group = AccumulationGroup();
  }

  // A scheduled checkpoint (every N steps, epoch end) that falls while
  // gradients accumulated under no_sync() are pending would lose them on
  // resume: it is deferred to the next batch whose backward synchronized
  // (the optimizer's step), so that resume stays exact. At the run's end it
  // is saved anyway, with a note.
  void save_if_due(bool epoch_end, bool run_end = false) {
    if (!checkpoints) return;
    if (checkpoints->should_save(state.step, epoch_end) && deferred_since < 0) {
      deferred_since = state.step;
    }
    if (deferred_since < 0) return;
    if (accumulating_now() && !run_end) {
      note_deferral();
      return;
    }
    note_pending_gradients("the run ended between optimizer steps");
    deferred_since = -1;
    save();
  }

  void note_deferral() {
    if (noted_deferral) return;
    noted_deferral = true;
    print0("note: the checkpoint due at step {} waits for the optimizer step: gradients "
           "accumulated under no_sync() are pending, and a checkpoint holds none (this note is "
           "shown once)",
           deferred_since);
  }

  // Says once that a checkpoint is taken while accumulated gradients are
  // pending: a run resumed from it cannot match an uninterrupted one.
  void note_pending_gradients(const char* why) {
    if (noted_pending || !accumulating_now()) return;
    noted_pending = true;
    print0("note: the checkpoint of step {} is saved while gradients accumulated under no_sync() "
           "are pending ({}); a checkpoint holds no gradients, so a run resumed from it loses those "
           "micro-batches' gradients and will not match an uninterrupted run; save after the "
           "optimizer step",
           state.step, why);
  }

  // Fabric::save(): inside a training batch's body, that batch counts as
  // trained (the user saves after the optimizer step), so that a resume
  // starts at the next batch instead of applying this one twice. Always
  // synchronous: the file exists when it returns its path.
  std::string save_explicit() {
    if (!batch_in_flight) return save(/*scheduled=*/false);
    describe_run();
    checkpoint::TrainingState counted = state;  // the model and the rest by pointer
    if (group.boundary) counted.step += 1;
    counted.position = *batch_in_flight;
    return write(counted, /*scheduled=*/false);
  }

  std::string save(bool scheduled = true) {
    describe_run();
    return write(state, scheduled);
  }

  // Saves `s` as the checkpoint of its step; a scheduled one in the
  // background under checkpoint_async. Collective.
  std::string write(const checkpoint::TrainingState& s, bool scheduled) {
    if (!checkpoints) {
      core::raise<ConfigError>(core::here(),
                               "Fabric::save without a checkpoint directory; set "
                               "FabricOptions::checkpoint_dir (--checkpoint-dir)");
    }
    // collective
    const std::string path = scheduled && options.checkpoint_async() ? checkpoints->save_async(capture(s), s.step)
                                                                     : checkpoints->save(capture(s), s.step);
    note_save_times(checkpoints->last_timings());
    return path;
  }

  // The run's last epoch ended: its asynchronous save is durable, or its
  // failure raised on every rank, before the loop ends. Collective.
  void finish_saves() {
    if (!checkpoints) return;
    checkpoints->wait();
    note_save_times(checkpoints->last_timings());
  }

  // What saves cost training since the last step record of the metrics log.
  void note_save_times(const checkpoint::CheckpointManager::Timings& t) {
    save_blocked_ms += t.blocked_ms;
    save_waited_ms += t.waited_ms;
    saved_since_record = true;
  }
};

/// "auto", "cpu", "cuda" or "cuda:N" as a device; ConfigError otherwise, or
/// for cuda:N beyond the visible GPUs.
torch::Device resolve_device(const std::string& option);

}  // namespace rankwise::fabric
