#pragma once
// The state a Fabric shares with its loaders (FabricLoader reaches it
// through LoaderHooks): the options and the device, the strategy, the
// training state, and the parts that each keep one concern: the run's
// identity (run_identity.h), gradient accumulation (accumulation.h), where
// checkpoints go and when (checkpoint_store.h, checkpoint_schedule.h), the
// progress and throughput (progress_meter.h) and the metrics log (run_log.h).
#include "rankwise/fabric.h"

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "fabric/accumulation.h"
#include "fabric/checkpoint_schedule.h"
#include "fabric/checkpoint_store.h"
#include "fabric/precision.h"
#include "fabric/preemption.h"
#include "fabric/progress_meter.h"
#include "fabric/run_identity.h"
#include "fabric/run_log.h"
#include "fabric/strategy.h"
#include "rankwise/amp/grad_scaler.h"
#include "rankwise/checkpoint/training_state.h"

namespace rankwise::fabric {

// Everything a Fabric and its loaders share.
class FabricCore {
 public:
  FabricOptions options;
  torch::Device device{torch::kCPU};
  // The strategy (FabricOptions::strategy): the model and the optimizer once set up.
  std::unique_ptr<Strategy> strategy;
  // Loss scaling under precision 16-mixed; null otherwise.
  std::unique_ptr<amp::GradScaler> scaler;
  // Step, epoch, position, metrics, scheduler, extras (the model and the
  // optimizer are the strategy's, added to each checkpoint).
  checkpoint::TrainingState state;
  RunIdentity identity;
  Accumulation accumulation;
  // With a checkpoint directory: replicated or sharded, as the strategy writes.
  std::unique_ptr<CheckpointStore> checkpoints;
  CheckpointSchedule schedule;
  // The checkpoint restored when training starts (--resume, Fabric::load), and its path.
  std::unique_ptr<PendingCheckpoint> pending;
  std::string pending_path;
  bool resumed = false;  // a checkpoint was restored
  bool started = false;  // training started (or load() ran): what track() adds is restored by now
  ProgressMeter meter;
  RunLog run_log;
  // SIGTERM noted while Fabric::epochs() runs with a checkpoint directory.
  Preemption preemption;
  // The step of the last checkpoint this run saved or resumed from.
  std::optional<int64_t> saved_step;
  // The end position of the training batch the loop body holds, if any.
  std::optional<int64_t> batch_in_flight;
  // Built by Fabric(argc, argv) with --help: nothing started; using it exits.
  bool help_only = false;
  bool warned_passes = false;
  // The training loaders were checked alike on every rank (first pass).
  bool loaders_checked = false;
  // The last loss given to backward() when it is a one-element CPU tensor
  // (reading a CUDA loss would wait for the GPU): the heartbeat's loss.
  std::optional<double> last_loss;
  // The run's total epochs (Fabric::epochs), 0 before.
  int64_t total_epochs = 0;
  // The epoch of Fabric::epochs()'s loop body, while one runs: log()'s epoch.
  std::optional<int64_t> loop_epoch;

  // FabricOptions::precision (precision.h).
  std::optional<c10::ScalarType> autocast_dtype() const { return fabric::autocast_dtype(options); }
  std::optional<c10::ScalarType> true_dtype() const { return fabric::true_dtype(options); }

  // The run's identity into the training state's extras.
  void describe_run() { identity.describe(state.extras, options, scaler.get()); }
  // Restores the pending checkpoint, once, on every rank.
  void ensure_resumed();

  fabric::Throughput throughput() { return meter.throughput(); }
  // The run's metrics log, opened at the first call (null without a
  // metrics_dir): its config record holds the program, the run's settings,
  // the training loader's sizes and log_hyperparams()'s entries.
  monitor::MetricsLog* log();
  // A training pass of `total` batches, `done` of them already, starts.
  void start_progress(int64_t total, int64_t done);
  // A training batch of `real_samples` (padding not counted) finished.
  void update_progress(int64_t real_samples);
  // The epoch's training ends (every rank): the steps since the last reduction.
  void end_progress();

  // After --help, once the program's own parser (if any) has had its turn.
  void exit_if_help_only() const {
    if (help_only) std::exit(0);
  }
  // True while the model holds gradients accumulated under no_sync().
  bool accumulating_now() const { return strategy->accumulating(); }

  // A scheduled checkpoint is saved when due (checkpoint_schedule.h). Collective.
  void save_if_due(bool epoch_end, bool run_end = false);
  // Fabric::save(): inside a training batch's body, that batch counts as
  // trained (the user saves after the optimizer step), so that a resume
  // starts at the next batch instead of applying this one twice. Always
  // synchronous: the checkpoint exists when it returns its path.
  std::string save_explicit();
  // The run's last epoch ended: the replicas are checked equal (Error
  // naming the parameters otherwise) and the asynchronous save is durable,
  // or its failure raised on every rank, before the loop ends. Collective.
  void finish_saves();
  // The ranks agreed on a preemption (preemption.h): the in-flight save
  // completes, the current step is saved unless it already is, and the
  // process exits with wire::kPreemptedExitCode. Collective.
  [[noreturn]] void exit_preempted();

 private:
  // After a progress reduction (every rank): the step record of the metrics log.
  void log_progress();
  // Saves `s` as the checkpoint of its step; a scheduled one in the
  // background under checkpoint_async. Collective.
  std::string write(const checkpoint::TrainingState& s, bool scheduled);
};

/// "auto", "cpu", "cuda" or "cuda:N" as a device; ConfigError otherwise, or
/// for cuda:N beyond the visible GPUs.
torch::Device resolve_device(const std::string& option);

}  // namespace rankwise::fabric
