#pragma once
/// \file fabric.h
/// The front door: a small object beside a libtorch training loop that makes it a correct
/// multi-process one (process group, device, seed, sanity header, the strategy's engine,
/// sharded loaders, checkpoints by policy). Every method marked collective must be called
/// by every rank in the same order (checked: CollectiveMismatchError). One Fabric per process.
/// See docs/fabric.md.

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "rankwise/fabric/loader.h"
#include "rankwise/fabric/module.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/parallel/fully_sharded.h"
#include "rankwise/log.h"
#include "rankwise/monitor/metrics_log.h"
#include "rankwise/monitor/progress_bar.h"
#include "rankwise/dist/process_group.h"

namespace rankwise {
namespace amp {
class GradScaler;
}
namespace metrics {
class MetricCollection;
}
namespace fabric {
/// The training loop's throughput (Fabric::throughput()), from the progress
/// reductions: the same on every rank.
struct Throughput {
  /// Global samples/s (every rank's real samples, by rank 0's clock) between
  /// the last two reductions, and over the current epoch so far (after the
  /// epoch's end: the whole epoch). NaN before the first reduction.
  double samples_per_s = std::numeric_limits<double>::quiet_NaN();
  double epoch_samples_per_s = std::numeric_limits<double>::quiet_NaN();
  /// FLOPs to train on one sample (FabricOptions::flops_per_sample, or
  /// counted for a model of Linear layers); nullopt when unknown.
  std::optional<double> flops_per_sample;
  /// Model FLOPs utilisation of samples_per_s against world_size devices'
  /// peak (monitor/throughput.h), normally in (0, 1] (above 1 the Fabric
  /// warns once: a wrong FLOPs or peak); nullopt without FLOPs per sample.
  std::optional<double> mfu;
};
}  // namespace fabric

/// What a Fabric does with its checkpoint directory when it starts.
enum class Resume {
  /// A new run (default): a directory that holds checkpoints of an earlier
  /// run is refused with ConfigError (choose kLatest, kOverwrite or another
  /// directory).
  kNew,
  /// Continue from the newest checkpoint that verifies, if there is one
  /// (else start from epoch 1, and say so). A checkpoint of another run is
  /// refused: other training data (dataset size), or another batch size
  /// mid-epoch. At another world size mid-epoch the epoch goes on with the
  /// samples not yet seen, each once.
  kLatest,
  /// Remove an earlier run's checkpoints, then start a new run.
  kOverwrite,
};

/// Options of Fabric (setters and getters as torch::nn options), e.g.
/// FabricOptions().device("cpu").seed(42).checkpoint_dir("ckpts").resume(Resume::kLatest).
struct FabricOptions {
  /// "auto" (this rank's own GPU when every local rank has one, else the
  /// CPU), "cpu", "cuda" (a GPU per local rank, else ConfigError) or
  /// "cuda:N" (e.g. cuda:0 for ranks sharing one GPU; N must be a visible GPU).
  TORCH_ARG(std::string, device) = "auto";
  /// The process group's backend: "auto", "gloo" or "nccl" (InitOptions::backend).
  TORCH_ARG(std::string, backend) = "auto";
  /// Timeout of every collective and of the rendezvous (InitOptions::timeout).
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::seconds(300);
  /// seed_everything(seed) on every rank at construction (the same model
  /// initialisation everywhere), and the training loader's shuffling seed.
  TORCH_ARG(uint64_t, seed) = 0;
  /// After setup() (the model is built and broadcast), reseed libtorch's
  /// generators with seed + rank, so that dropout masks and random
  /// augmentations differ between ranks. Default false: the same stream on
  /// every rank.
  TORCH_ARG(bool, seed_per_rank) = false;
  /// Directory of the checkpoints (CheckpointManager: numbered files and a
  /// `latest` pointer, rank 0 writes, every rank waits; under strategies
  /// "zero1" and "fsdp" ShardedCheckpointManager: numbered directories, every
  /// rank writes its shards). Empty (default): no checkpoints, save() is an error.
  TORCH_ARG(std::string, checkpoint_dir) = "";
  /// Also save every N steps (training batches) within an epoch; 0
  /// (default): only at epoch ends.
  TORCH_ARG(int64_t, checkpoint_every) = 0;
  /// Checkpoints to keep (at least 1).
  TORCH_ARG(int64_t, keep_last) = 3;
  /// What to do with an existing checkpoint directory (see Resume).
  TORCH_ARG(Resume, resume) = Resume::kNew;
  /// The checkpoint directory is on each node's own disk, not shared: a
  /// resume sends rank 0's checkpoint to the ranks of the other nodes at
  /// once (CollectiveLoadOptions::node_local). Default false: every rank
  /// reads the shared directory, waiting up to 10 s for a stale view
  /// (network filesystems) before rank 0 sends it the file.
  TORCH_ARG(bool, checkpoint_node_local) = false;
  /// Save the scheduled checkpoints (checkpoint_every, epoch ends) in the
  /// background (CheckpointManager::save_async): training waits only while
  /// rank 0 copies the state into host buffers, at the cost of one more copy
  /// of the state in rank 0's memory. A failed save is raised on every rank
  /// at the next save or at the end of the run (the last epoch's end waits
  /// for it). save() stays synchronous. Needs checkpoint_dir. Default false.
  TORCH_ARG(bool, checkpoint_async) = false;
  /// Print the sanity header (monitor::print_header()) at construction.
  TORCH_ARG(bool, print_header) = true;
  /// Checked collectives (InitOptions::check_collectives): one extra
  /// all_gather of 256 bytes per collective of the process group.
  TORCH_ARG(bool, check_collectives) = true;
  /// Gradient accumulation over N training batches: the loader runs N-1 of every N under
  /// no_sync(), backward() weighs each loss by its share of the group's samples (1/N when
  /// full), optimizer_step() steps at the N-th batch and a pass's last; step() then counts
  /// optimizer steps (checkpoint_every too). 1 (default): none.
  TORCH_ARG(int64_t, accumulate) = 1;
  /// Numerical precision, Lightning's names (docs/fabric.md#precision): "32-true" (default,
  /// float32); "bf16-mixed" (loop bodies autocast to bfloat16, float32 state); "16-mixed"
  /// (autocast to float16 and a checkpointed amp::GradScaler; ConfigError where libtorch
  /// cannot autocast float16 on the device); "bf16-true" (model and float batches bfloat16).
  TORCH_ARG(std::string, precision) = "32-true";
  /// How the model trains across ranks (docs/fabric.md#strategies): "ddp" (default, DDP
  /// replicas), "zero1" (DDP and a ZeroRedundancyOptimizer built from yours) or "fsdp"
  /// (FullyShardedDataParallel with `fsdp`); zero1 and fsdp write sharded checkpoints.
  /// Another value is a ConfigError.
  TORCH_ARG(std::string, strategy) = "ddp";
  /// FullyShardedDataParallel's options under strategy "fsdp" (units,
  /// reshard_after_forward, prefetch). Its mixed_precision comes from
  /// `precision`: bf16-mixed gathers and computes in bfloat16, 16-mixed in
  /// float16 (with the GradScaler), gradients reduced in float32; a policy
  /// of your own needs precision 32-true. Ignored by the other strategies.
  TORCH_ARG(parallel::FullyShardOptions, fsdp) = {};
  /// Directory of the run's metrics (rank 0 writes; created if missing):
  /// log() and log_dict() append to metrics.jsonl (monitor::MetricsLog, which
  /// rankwise-report draws), metrics.csv and live TensorBoard event files
  /// (`tensorboard --logdir DIR`); a resumed run (Resume::kLatest) appends, a
  /// new run replaces an earlier run's files there (with a note).
  /// Empty (default): none, and log() does nothing.
  TORCH_ARG(std::string, metrics_dir) = "";
  /// Progress of the training loader on rank 0 (monitor::ProgressBar: a bar
  /// on a terminal, else a line every line_interval), reduced over ranks every
  /// every_n_steps batches (one small all_gather, also with style kOff, which
  /// shows nothing): throughput(), and with a metrics_dir a step record of
  /// the loss, samples/s, MFU and each rank's step time per reduction.
  TORCH_ARG(monitor::ProgressBarOptions, progress) = {};
  /// FLOPs to train on one sample, for MFU; 0 (default): counted when the
  /// model is made of Linear layers (monitor::training_flops_per_sample),
  /// else no MFU.
  TORCH_ARG(double, flops_per_sample) = 0;
  /// Peak FLOP/s of one device for MFU; 0 (default): the table's for a known
  /// GPU at the precision's compute dtype, else measured (monitor::peak_flops).
  TORCH_ARG(double, peak_flops) = 0;
};

/// "" when `value` is a valid FabricOptions::device ("auto", "cpu", "cuda",
/// "cuda:N"), else the reason it is not (for command-line validators).
std::string device_option_error(const std::string& value);
/// "" when `value` is a valid FabricOptions::precision ("32-true",
/// "bf16-mixed", "16-mixed", "bf16-true"), else the reason it is not.
std::string precision_option_error(const std::string& value);

/// "" when `value` is a valid FabricOptions::strategy ("ddp", "fsdp",
/// "zero1"), else the reason it is not.
std::string strategy_option_error(const std::string& value);

/// The facade (see the file comment).
class Fabric {
 public:
  /// Collective: checks the options, dist::init() with the device's backend, seed_everything,
  /// the sanity header, and with a checkpoint_dir the manager (rank 0 creates and locks it)
  /// and the Resume policy (kLatest loads onto the CPU; restored when epochs() starts).
  /// Throws ConfigError (naming the bad option), RendezvousError, CheckpointError.
  explicit Fabric(FabricOptions options = {});
  /// The same with options from the command line (`--device`, `--seed`, `--resume`, ...;
  /// fabric/cli.h adds them to a CLI11 parser instead), starting from `defaults`. They are
  /// removed from argc/argv (other arguments stay, in order); `--help` prints them on rank 0
  /// and stays in argv. Collective. Throws ConfigError naming the bad flag.
  Fabric(int& argc, char** argv, FabricOptions defaults = {});
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;
  /// True on global rank 0.
  bool is_global_zero() const { return rank() == 0; }
  /// This rank's device (FabricOptions::device).
  torch::Device device() const;
  const FabricOptions& options() const;

  /// Moves `model` to device() (bf16-true: casts it), wraps it in DDP (rank 0's parameters
  /// broadcast), and makes it and `optimizer` part of every checkpoint; both are kept by
  /// reference and must outlive training. Returns the model to forward through. Under
  /// "zero1" steps a ZeroRedundancyOptimizer built from `optimizer`. Collective; once,
  /// before the loop. Throws ConfigError when called twice, and under "fsdp" (use
  /// setup_module and setup_optimizers).
  template <typename ModuleType>
  parallel::DistributedDataParallel<ModuleType> setup(ModuleType model, torch::optim::Optimizer& optimizer,
                                            parallel::DistributedDataParallelOptions ddp_options = {}) {
    refuse_setup_with_optimizer();
    auto ddp = wrap_in_ddp(std::move(model), ddp_options);
    setup_optimizers(optimizer);
    return ddp;
  }

  /// Lightning's setup_module: moves `model` to device() (bf16-true: casts it) and wraps it
  /// in the strategy's engine (DDP with `ddp_options` under ddp and zero1; FSDP with
  /// FabricOptions::fsdp, sharding in place). Build the optimizer afterwards, over the
  /// result's parameters(). Checkpointed. Collective; once, before the training loop.
  /// Throws ConfigError when called twice (setup() included).
  template <typename ModuleType>
  fabric::FabricModule<ModuleType> setup_module(ModuleType model,
                                                parallel::DistributedDataParallelOptions ddp_options = {}) {
    if (!shards_parameters()) return fabric::FabricModule<ModuleType>(wrap_in_ddp(std::move(model), ddp_options));
    place_model(*parallel::ddp::as_module(model));
    parallel::FullyShardedDataParallel<ModuleType> fsdp(std::move(model), options().fsdp(), dist::process_group());
    register_module(fabric::wrapped_fsdp(fsdp));
    return fabric::FabricModule<ModuleType>(std::move(fsdp));
  }

  /// Lightning's setup_optimizers: the optimizer optimizer_step() steps and checkpoints
  /// hold, built over setup_module()'s parameters(); kept by reference (must outlive
  /// training). Under "fsdp" it must hold exactly this rank's shards; under "zero1" a
  /// ZeroRedundancyOptimizer of its type (SGD, Adam, AdamW, RMSprop, Adagrad) steps instead,
  /// its groups' learning rates copied before each step. Collective; once, after
  /// setup_module. Throws ConfigError (wrong parameters, another optimizer type).
  void setup_optimizers(torch::optim::Optimizer& optimizer);

  /// The training loader (see FabricLoader): this rank's shard of `dataset`
  /// (DistributedSampler with PyTorch's padding; shuffled with
  /// FabricOptions::seed and the epoch when `shuffle`) in batches of
  /// `batch_size`. Dataset and batch sizes identify the run in checkpoints and
  /// must be alike on every rank (the first pass checks). ConfigError: a
  /// second loader, a batch size below 1, sizes unlike. Local.
  template <typename Dataset>
  fabric::FabricLoader<Dataset> setup_dataloader(Dataset dataset, int64_t batch_size, bool shuffle = true) {
    const auto size = static_cast<int64_t>(dataset.size().value());
    register_training_loader(size, batch_size);
    return fabric::FabricLoader<Dataset>(core_, std::move(dataset), batch_size,
                                 data::DistributedSamplerOptions().shuffle(shuffle).seed(options().seed()),
                                 /*training=*/true);
  }
  /// An evaluation loader: every sample of `dataset` exactly once across
  /// ranks, in order, no padding; under fsdp (whose forward is collective)
  /// padded as the training loader is, so that every rank runs the same
  /// batches: count with padding_mask() (see FabricLoader). ConfigError for
  /// a batch size below 1. Local.
  template <typename Dataset>
  fabric::FabricLoader<Dataset> setup_eval_dataloader(Dataset dataset, int64_t batch_size) {
    check_batch_size(batch_size);
    return fabric::FabricLoader<Dataset>(core_, std::move(dataset), batch_size,
                                 data::DistributedSamplerOptions().shuffle(false).pad(shards_parameters()),
                                 /*training=*/false);
  }

  /// Also checkpoint (and restore) this learning-rate scheduler's state.
  /// Local; before training starts.
  void track(torch::optim::LRScheduler& scheduler);
  /// Also checkpoint these metrics' per-rank states under `name`, so that a
  /// run resumed mid-epoch continues an epoch's partial sums; the training
  /// loader resets them at the start of every epoch (not when a resumed
  /// epoch continues). Local; before training starts.
  void track(const std::string& name, metrics::MetricCollection& metrics);
  /// User entries saved in every checkpoint (from rank 0) and restored on
  /// resume (TrainingState::extras). Keys starting with "fabric." are the
  /// Fabric's own.
  std::map<std::string, c10::IValue>& extras();

  /// loss.backward(); the engine reduces the gradients (DDP all_reduce, FSDP reduce-scatter).
  /// With accumulate(N), in a training batch, the scalar loss is first weighed by the batch's
  /// share of its group's samples (1/N when full); with "16-mixed" it is scaled by the
  /// GradScaler; mixed precisions run backward without autocast. Collective in effect.
  /// Throws Error when no model was set up.
  void backward(const torch::Tensor& loss, std::source_location site = std::source_location::current());

  /// The optimizer's step and zero_grad() (under "zero1" the ZeroRedundancyOptimizer's,
  /// collective) at an accumulation group's end: every batch, or with accumulate(N) every
  /// N-th and a pass's last. Returns whether it stepped. With "16-mixed" it steps through
  /// the GradScaler: a step with inf/nan gradients is skipped on every rank (false), which
  /// makes it collective. Otherwise local. Throws Error before the optimizer is set up.
  bool optimizer_step(std::source_location site = std::source_location::current());
  /// Clips the model's gradients by their total norm (torch.nn.utils.clip_grad_norm_; under
  /// zero1 and fsdp the engine's, collective) and returns the norm before clipping (0-dim).
  /// After backward(), before optimizer_step(), at a group's end (Error mid-accumulation).
  /// With "16-mixed" it unscales first (collective); otherwise local under "ddp". Throws as
  /// parallel::clip_grad_norm, Error before setup.
  torch::Tensor clip_gradients(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false,
                               std::source_location site = std::source_location::current());
  /// The GradScaler that precision "16-mixed" steps through (e.g. its
  /// get_scale() for a log); null with any other precision. Local.
  amp::GradScaler* grad_scaler();
  /// True inside a training batch that is not the last of its accumulation
  /// group (FabricOptions::accumulate): its backward communicates nothing
  /// and optimizer_step() does nothing. Local.
  bool is_accumulating() const;

  /// Runs `block` on rank 0 (with `local`, each node's local rank 0) first, then on the
  /// others, who wait in a monitored barrier "rank_zero_first" for `timeout` (0: the group's;
  /// TimeoutError names the missing ranks). A first rank's exception is rethrown there and
  /// raises PeerError on the others. Collective: every rank, same order.
  void rank_zero_first(const std::function<void()>& block, bool local = false,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  /// The run's epochs, from the current one (0, or a resumed run's) up to `total` (the run's
  /// total, exclusive, 0-based). Starting it restores a pending checkpoint (after setup(),
  /// setup_dataloader(), track()); a finished run yields nothing. Each epoch's end saves the
  /// epoch-end checkpoint (collective).
  class EpochRange;
  EpochRange epochs(int64_t total, std::source_location site = std::source_location::current());

  /// The current epoch (0-based) and the steps so far: training batches
  /// whose loop body finished, or with FabricOptions::accumulate the
  /// optimizer steps (accumulation groups that finished); with accumulation
  /// by hand (no_sync() in the loop) every micro-batch counts. The step is
  /// counted when the loader moves on, so a batch left by `break` is not. Scheduled checkpoints that fall mid-accumulation wait for the
  /// optimizer's step (docs/fabric.md).
  int64_t epoch() const;
  int64_t step() const;

  /// Logs values at the current step() and epoch to FabricOptions::
  /// metrics_dir's logs (Lightning Fabric's fabric.log / log_dict). Values
  /// are written as given: reduce them over ranks first (metrics, or
  /// all_reduce) and call on every rank; rank 0 writes, the others do
  /// nothing. Local. No-op without a metrics_dir. A non-finite value is
  /// written as JSON null and left out of TensorBoard.
  void log(const std::string& name, double value);
  void log_dict(const monitor::MetricValues& values);
  /// Adds entries (e.g. the learning rate, the epochs) to the config record
  /// that opens metrics_dir's log, beside the Fabric's own (program, device,
  /// seed, precision, the training loader's sizes). Local; before the log's
  /// first record (ConfigError after). No-op without a metrics_dir.
  void log_hyperparams(const monitor::RunConfig& values);
  /// Logs an epoch record (what rankwise-report's per-epoch charts draw) for
  /// the epoch the training loader finished last, with its global samples/s.
  /// Call after the epoch's training pass, on every rank (rank 0 writes).
  /// Local. No-op without a metrics_dir.
  void log_epoch(const monitor::MetricValues& values);
  /// The training loop's throughput and MFU (see fabric::Throughput). Local;
  /// on the CPU the peak is measured at the first training pass (0.1 s).
  fabric::Throughput throughput();
  /// The run's metrics log (null without FabricOptions::metrics_dir), for
  /// records log_dict() does not write (epoch records, per-rank statistics).
  monitor::MetricsLog* metrics_log();

  /// Saves the whole training state now as the current step's checkpoint (in a loop body
  /// that batch counts as trained: call after the optimizer step); synchronous, also under
  /// checkpoint_async. Collective: rank 0 writes (zero1, fsdp: every rank its shards); a
  /// failure raises the same CheckpointError on every rank, keeping older checkpoints.
  /// Returns the path. Throws ConfigError without a checkpoint_dir.
  std::string save(std::source_location site = std::source_location::current());
  /// Restores the training state from the checkpoint file `path` as rank 0
  /// sees it (load_collective(): every rank gets the same bytes, onto the
  /// CPU then the model's device; under "zero1" and "fsdp" `path` is a
  /// sharded checkpoint's directory, each rank reading its shards), with the run-identity checks of
  /// Resume::kLatest. Collective: every rank, same order. Throws
  /// CheckpointError, ConfigError.
  void load(const std::string& path, std::source_location site = std::source_location::current());

  /// rankwise::print on this rank, and print0 (rank 0 writes; no
  /// communication, so it may sit inside a branch only rank 0 takes).
  template <typename... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    rankwise::print(format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void print0(fmt::format_string<Args...> format, Args&&... args) const {
    rankwise::print0(format, std::forward<Args>(args)...);
  }

  /// The process group's collectives (collective: every rank, same order;
  /// checked, see the file comment). all_reduce of a double returns the
  /// reduced value (float64). Errors name the caller's line (`site`, filled
  /// in by the compiler).
  void all_reduce(torch::Tensor& tensor, dist::ReduceOp op = dist::ReduceOp::kSum,
                  std::source_location site = std::source_location::current());
  double all_reduce(double value, dist::ReduceOp op = dist::ReduceOp::kSum,
                    std::source_location site = std::source_location::current());
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor,
                                        std::source_location site = std::source_location::current());
  void broadcast(torch::Tensor& tensor, int root = 0,
                 std::source_location site = std::source_location::current());
  void barrier(std::source_location site = std::source_location::current());
  /// rankwise::dist::monitored_barrier (process_group.h): names the ranks that do
  /// not arrive within `timeout` (0: the group's).
  void monitored_barrier(const std::string& name,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                         bool wait_all_ranks = false,
                         std::source_location site = std::source_location::current());

 private:
  void claim_and_start(FabricOptions options);
  void start(FabricOptions options);
  // The model wrapped in DistributedDataParallel (ddp, zero1), registered.
  template <typename ModuleType>
  parallel::DistributedDataParallel<ModuleType> wrap_in_ddp(ModuleType model,
                                                  parallel::DistributedDataParallelOptions ddp_options) {
    place_model(*parallel::ddp::as_module(model));
    parallel::DistributedDataParallel<ModuleType> ddp(std::move(model), ddp_options, dist::process_group());
    register_module(fabric::wrapped_ddp(ddp));
    return ddp;
  }
  // Before wrapping (every rank alike): refuses a second model, moves it to
  // the device (and dtype), counts its FLOPs.
  void place_model(torch::nn::Module& model);
  void register_module(fabric::WrappedModel model);
  bool shards_parameters() const;
  void refuse_setup_with_optimizer() const;
  void register_training_loader(int64_t dataset_size, int64_t batch_size);
  static void check_batch_size(int64_t batch_size);

  std::shared_ptr<fabric::FabricCore> core_;
};

/// Fabric::epochs(): `for (int64_t epoch : fabric.epochs(total))`.
class Fabric::EpochRange {
 public:
  class Iterator {
   public:
    Iterator(fabric::FabricCore* core, int64_t total, std::source_location site = {})
        : core_(core), total_(total), site_(site) {}
    int64_t operator*() const { return current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return !(*this == other); }
    bool operator==(const Iterator& other) const;

   private:
    friend class EpochRange;
    fabric::FabricCore* core_;
    int64_t total_;
    std::source_location site_;  // the epoch loop's line: its saves are reported there
    int64_t current_ = 0;
  };
  EpochRange(std::shared_ptr<fabric::FabricCore> core, int64_t total, std::source_location site)
      : core_(std::move(core)), total_(total), site_(site) {}
  Iterator begin();
  Iterator end() { return Iterator(nullptr, total_); }

 private:
  std::shared_ptr<fabric::FabricCore> core_;
  int64_t total_;
  std::source_location site_;
};

}  // namespace rankwise
