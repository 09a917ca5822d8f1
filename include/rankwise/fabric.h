#pragma once
/// \file fabric.h
/// The front door: a small object beside an ordinary libtorch training loop
/// that makes it a correct multi-process one (in the spirit of Lightning
/// Fabric). It initializes the process group, picks this rank's device,
/// seeds, prints the sanity header, wraps the model in its strategy's engine
/// (DistributedDataParallel, with ZeRO-1 for "zero1", or
/// FullyShardedDataParallel for "fsdp": FabricOptions::strategy), builds
/// sharded data loaders that call set_epoch for you, and saves, resumes and
/// refuses checkpoints by policy.
///
/// \code
///   rankwise::Fabric fabric(rankwise::FabricOptions().checkpoint_dir("ckpts").resume(rankwise::Resume::kLatest));
///   Net model;
///   torch::optim::SGD optimizer(model->parameters(), 0.01);
///   auto ddp = fabric.setup(model, optimizer);
///   auto loader = fabric.setup_dataloader(dataset, /*batch_size=*/64);
///   for (int64_t epoch : fabric.epochs(10)) {     // starts at a resumed run's epoch
///     for (auto& batch : loader) {                // this rank's shard, on fabric.device()
///       optimizer.zero_grad();
///       fabric.backward(torch::cross_entropy_loss(ddp.forward(batch.data), batch.target));
///       optimizer.step();
///     }                                           // checkpoints on the schedule
///     fabric.print0("epoch {} done", epoch + 1);  // rank 0 prints; every rank computes
///   }
/// \endcode
///
/// Under every strategy (Lightning's two-call setup, docs/fabric.md#strategies):
/// \code
///   auto model = fabric.setup_module(Net(...));              // fabric::FabricModule<Net>
///   torch::optim::AdamW optimizer(model.parameters(), opts); // after setup_module
///   fabric.setup_optimizers(optimizer);
///   ... fabric.backward(loss_of(model(x))); fabric.optimizer_step(); ...
/// \endcode
///
/// The same program runs as one process without a launcher (world size 1,
/// its own rendezvous store on a free port), under rankwise-run, torchrun,
/// mpirun or srun (see env.h).
///
/// Every rank runs the whole program: every method marked *collective* must
/// be called by every rank, in the same order. The Fabric turns on checked
/// collectives (FabricOptions::check_collectives), so a collective that only
/// some ranks reach (e.g. inside `if (fabric.is_global_zero())`) fails with
/// a CollectiveMismatchError naming each rank's call when the others reach
/// their next collective of the process group with another operation, dtype
/// or shape. Not covered: a next collective with the same signature (the
/// calls pair), and DDP's own collectives (unchecked, to keep a step at its
/// cost): ranks in DDP's forward meet the checking rank at the timeout
/// (TimeoutError).
///
/// One Fabric per process at a time (it uses the global process group,
/// rankwise::dist::init(), which outlives it).

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
  /// samples not yet seen (TrainingState::epoch_stretches).
  kLatest,
  /// Remove an earlier run's checkpoints, then start a new run.
  kOverwrite,
};

/// Options of Fabric (setters and getters as torch::nn options).
///
/// Example:
/// \code
///   rankwise::Fabric fabric(rankwise::FabricOptions()
///                               .device("cpu")
///                               .seed(42)
///                               .checkpoint_dir("ckpts")
///                               .checkpoint_every(500)
///                               .resume(rankwise::Resume::kLatest));
/// \endcode
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
  /// Gradient accumulation over N training batches (micro-batches), as a
  /// policy: the training loader runs N-1 of every N batches under DDP's
  /// no_sync(), backward() weighs each batch's loss by its share of the
  /// group's samples (1/N for full batches), and
  /// optimizer_step() steps (and zeroes the gradients) at the N-th batch and
  /// at each pass's last. step() then counts optimizer steps, so
  /// checkpoint_every is in optimizer steps. 1 (default): no accumulation.
  TORCH_ARG(int64_t, accumulate) = 1;
  /// Numerical precision, with Lightning Fabric's names (docs/fabric.md#precision):
  /// "32-true" (default: float32, nothing changes); "bf16-mixed" (the
  /// loaders' batches run their loop body under autocast to bfloat16 on the
  /// device, backward() outside it; parameters, gradients and optimizer
  /// state stay float32); "16-mixed" (autocast to float16, and an
  /// amp::GradScaler: backward() scales the loss, optimizer_step() steps and
  /// updates through it, its state is checkpointed; ConfigError where this
  /// libtorch cannot autocast float16 on the device, e.g. 1.13 on the CPU);
  /// "bf16-true" (setup() casts the model to bfloat16, the loaders cast
  /// floating-point batches).
  TORCH_ARG(std::string, precision) = "32-true";
  /// How the model trains across ranks, with Lightning Fabric's names
  /// (docs/fabric.md#strategies): "ddp" (default: the model replicated in
  /// DistributedDataParallel), "zero1" (DDP, and the optimizer's state
  /// sharded by a ZeroRedundancyOptimizer built from the user's optimizer)
  /// or "fsdp" (FullyShardedDataParallel with the options `fsdp`: parameters,
  /// gradients and optimizer state sharded). zero1 and fsdp write sharded
  /// checkpoints. Another value is a ConfigError naming the three.
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
  /// Collective (every rank): checks the options (ConfigError naming the bad
  /// one), rankwise::dist::init() with the device's backend, seed_everything(seed),
  /// the sanity header, and with a checkpoint directory the CheckpointManager
  /// (rank 0 creates and locks it) and the resume policy: Resume::kNew
  /// refuses a directory with checkpoints, kOverwrite clears it, kLatest
  /// loads the newest checkpoint (onto the CPU, every rank), restored when
  /// training starts (see epochs()). Throws ConfigError, RendezvousError,
  /// CheckpointError.
  explicit Fabric(FabricOptions options = {});
  /// The same with the options from the command line (`--device`, `--seed`,
  /// `--checkpoint-dir`, `--checkpoint-every`, `--keep-last`, `--resume`,
  /// `--overwrite-checkpoints`, `--accumulate`, `--precision`, ...; see
  /// fabric/cli.h to add them to a program's
  /// own CLI11 parser instead), starting from `defaults`. They are removed
  /// from argc/argv; the other arguments stay, in order, for the program's
  /// own parser. `--help` prints them on rank 0, starts nothing and stays in
  /// argv: the program's parser then prints its own flags and exits, or the
  /// first use of the Fabric (setup(), rank(), ...) exits with 0. A bad value
  /// is a ConfigError that says which flag and why.
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

  /// Moves `model` to device() (and with precision "bf16-true" casts it to
  /// bfloat16) and wraps it in DistributedDataParallel
  /// (rank 0's parameters broadcast); `optimizer` (built over the model's
  /// parameters, before or after this call) and the model become part of
  /// every checkpoint; the Fabric keeps references to both, so they must
  /// stay alive while it trains, saves or loads. Collective. Call once, before the training loop.
  /// Returns the wrapped model: forward through it. Under strategy "zero1"
  /// the Fabric steps a ZeroRedundancyOptimizer built from `optimizer`
  /// (see setup_optimizers). Throws ConfigError when called twice, and under
  /// strategy "fsdp", whose optimizer must be built over the sharded
  /// parameters: use setup_module and setup_optimizers there.
  template <typename ModuleType>
  parallel::DistributedDataParallel<ModuleType> setup(ModuleType model, torch::optim::Optimizer& optimizer,
                                            parallel::DistributedDataParallelOptions ddp_options = {}) {
    refuse_setup_with_optimizer();
    auto ddp = wrap_in_ddp(std::move(model), ddp_options);
    setup_optimizers(optimizer);
    return ddp;
  }

  /// Lightning Fabric's setup_module: moves `model` to device() (with
  /// "bf16-true" casts it to bfloat16) and wraps it in the strategy's engine:
  /// DistributedDataParallel (`ddp_options`) under "ddp" and "zero1",
  /// FullyShardedDataParallel (FabricOptions::fsdp) under "fsdp", which
  /// shards it in place. Returns the FabricModule to forward through; build
  /// the optimizer after this call, over its parameters() (this rank's shards
  /// under fsdp), and give it to setup_optimizers(). The model becomes part
  /// of every checkpoint. Collective. Call once, before the training loop.
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

  /// Lightning Fabric's setup_optimizers: the optimizer that
  /// optimizer_step() steps and every checkpoint holds, built over the
  /// parameters() of setup_module()'s model. Under "fsdp" it must hold
  /// exactly this rank's shards (ConfigError otherwise, e.g. for an optimizer
  /// built over the unwrapped module's parameters). Under "zero1" a
  /// ZeroRedundancyOptimizer of its type (SGD, Adam, AdamW, RMSprop or
  /// Adagrad; ConfigError for another) with each group's options is built
  /// over it, and optimizer_step() steps that instead (the learning rates
  /// of `optimizer`'s groups, a scheduler's included, are copied over before
  /// each step). The Fabric keeps a reference: it must stay alive while the
  /// Fabric trains, saves or loads. Collective. Once, after setup_module.
  void setup_optimizers(torch::optim::Optimizer& optimizer);

  /// The training loader (see FabricLoader): this rank's shard of `dataset`
  /// (dataset.size() samples; DistributedSampler with PyTorch's padding,
  /// shuffled with FabricOptions::seed and the epoch when `shuffle`), in
  /// batches of `batch_size`. Its dataset size and batch size identify the
  /// run in checkpoints. One per Fabric (ConfigError for a second, or a
  /// batch size below 1). Local.
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

  /// loss.backward(); the strategy's engine reduces the gradients (DDP's
  /// hooks all_reduce them; FSDP's reduce-scatter them into the shards).
  /// With FabricOptions::accumulate(N), inside a training batch, the loss
  /// (a scalar mean over the batch) is first multiplied by the batch's share
  /// of its accumulation group's samples (1/N when the batches are full), so
  /// N batches of B give the gradient of one batch of N*B, and a pass's
  /// shorter last group that of one batch of its samples. With precision "16-mixed" it backs up
  /// the loss times the GradScaler's scale; under the mixed precisions the
  /// backward pass runs without autocast. Collective in effect. Throws
  /// Error when no model was set up: the gradients would not be averaged.
  void backward(const torch::Tensor& loss);

  /// The optimizer's step and zero_grad() (of setup()'s or
  /// setup_optimizers()' optimizer; under "zero1" of the
  /// ZeroRedundancyOptimizer built from it, collective), at the
  /// end of an accumulation group: every batch without
  /// FabricOptions::accumulate, else every N-th batch and a pass's last.
  /// Returns whether it stepped (step a learning-rate scheduler then).
  /// With precision "16-mixed" the step goes through the GradScaler
  /// (scaler.step(optimizer), scaler.update()): a step whose gradients hold
  /// an inf or a nan is skipped on every rank (false) and the scale backs
  /// off; that makes it collective. Otherwise local. Throws Error before
  /// the optimizer is set up.
  bool optimizer_step();
  /// Clips the model's gradients by their total norm, as
  /// torch.nn.utils.clip_grad_norm_ (under "ddp" parallel::clip_grad_norm;
  /// under "zero1" the ZeroRedundancyOptimizer's clip_grad_norm and under
  /// "fsdp" FullyShardedDataParallel's, both collective), and returns the total
  /// norm before clipping (a 0-dim tensor). Call it after backward() and
  /// before optimizer_step(), at a group's end when accumulating
  /// (`if (!fabric.is_accumulating())`; Error in a batch that accumulates:
  /// its gradients are not yet averaged). With precision "16-mixed" it
  /// unscales the gradients first (scaler.unscale_, collective). Otherwise
  /// local under "ddp": DDP made every rank's gradients the same. Throws as
  /// parallel::clip_grad_norm, Error before setup.
  torch::Tensor clip_gradients(double max_norm, double norm_type = 2.0,
                               bool error_if_nonfinite = false);
  /// The GradScaler that precision "16-mixed" steps through (e.g. its
  /// get_scale() for a log); null with any other precision. Local.
  amp::GradScaler* grad_scaler();
  /// True inside a training batch that is not the last of its accumulation
  /// group (FabricOptions::accumulate): its backward communicates nothing
  /// and optimizer_step() does nothing. Local.
  bool is_accumulating() const;

  /// Runs `block` on rank 0 first (with `local`, on each node's local rank
  /// 0), then on the other ranks, e.g. to download or prepare data once.
  /// The others wait in a monitored barrier named "rank_zero_first" for at
  /// most `timeout` (0: the process group's), which names the ranks that
  /// did not arrive. A block that throws on a first rank is rethrown there
  /// and raises PeerError on every other rank (naming that rank), before they
  /// run theirs: nobody hangs. Collective: every rank, same order.
  void rank_zero_first(const std::function<void()>& block, bool local = false,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  /// The epochs of the run: from the current epoch (0, or a resumed run's)
  /// up to `total` (exclusive, 0-based; `total` is the run's total, not the
  /// number still to do). Starting it restores a pending checkpoint (every
  /// rank; after setup(), setup_dataloader() and track()); when a resumed run
  /// is already done it prints so and yields nothing. After each epoch's
  /// body, the epoch ends (if the training loader did not end it) and the
  /// epoch-end checkpoint is saved (collective).
  class EpochRange;
  EpochRange epochs(int64_t total);

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

  /// Saves the whole training state now as the checkpoint of the current
  /// step. Inside a training batch's loop body that batch counts as trained:
  /// call it after the optimizer step, and a resume starts at the next batch
  /// (with a note when gradients accumulated under no_sync() are pending: a
  /// checkpoint holds none, see docs/fabric.md). Collective: rank 0 writes
  /// (under "zero1" and "fsdp" every rank its shards), every rank waits; a failure raises the
  /// same CheckpointError on every rank and keeps the previous checkpoints.
  /// Synchronous under checkpoint_async too: the file exists when it returns.
  /// Returns the file's path. Throws ConfigError without a checkpoint_dir.
  std::string save();
  /// Restores the training state from the checkpoint file `path` as rank 0
  /// sees it (load_collective(): every rank gets the same bytes, onto the
  /// CPU then the model's device; under "zero1" and "fsdp" `path` is a
  /// sharded checkpoint's directory, each rank reading its shards), with the run-identity checks of
  /// Resume::kLatest. Collective: every rank, same order. Throws
  /// CheckpointError, ConfigError.
  void load(const std::string& path);

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
    Iterator(fabric::FabricCore* core, int64_t total) : core_(core), total_(total) {}
    int64_t operator*() const { return current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return !(*this == other); }
    bool operator==(const Iterator& other) const;

   private:
    friend class EpochRange;
    fabric::FabricCore* core_;
    int64_t total_;
    int64_t current_ = 0;
  };
  EpochRange(std::shared_ptr<fabric::FabricCore> core, int64_t total)
      : core_(std::move(core)), total_(total) {}
  Iterator begin();
  Iterator end() { return Iterator(nullptr, total_); }

 private:
  std::shared_ptr<fabric::FabricCore> core_;
  int64_t total_;
};

}  // namespace rankwise
