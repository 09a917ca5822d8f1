#pragma once
/// \file loader.h
/// The data loader that rankwise::Fabric builds (Fabric::setup_dataloader,
/// Fabric::setup_eval_dataloader): this rank's batches of a libtorch dataset,
/// by DistributedSampler, moved to the Fabric's device.

#include <torch/data/example.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <source_location>
#include <vector>

#include "rankwise/data/distributed_sampler.h"
#include "rankwise/metrics/metric.h"

namespace rankwise::fabric {

class FabricCore;

/// Where a Fabric's loaders put a batch's tensors: on its device, and with
/// precision bf16-true floating-point ones as bfloat16 (as Lightning's
/// bf16-true converts inputs).
struct BatchTarget {
  torch::Device device;
  std::optional<torch::ScalarType> floating_dtype;
  torch::Tensor operator()(const torch::Tensor& tensor) const {
    if (floating_dtype && tensor.is_floating_point()) return tensor.to(device, *floating_dtype);
    return tensor.to(device);
  }
};

/// What a Fabric's loaders need from it (implemented in src/fabric/fabric.cpp).
struct LoaderHooks {
  /// The epoch a pass of an evaluation loader shuffles with (the Fabric's).
  static int64_t epoch(FabricCore& core);
  /// Start of a pass of the training loader: resumes from the checkpoint
  /// first (once), resets the tracked metrics at an epoch's start, and returns
  /// the epoch and the position (indices of this rank's shard already used).
  /// `loop` is the training loop's line: collectives inside rankwise during
  /// the pass (DDP's step, the progress) are reported there.
  static std::pair<int64_t, int64_t> begin_training_pass(FabricCore& core, const std::source_location& loop);
  /// The training loop was left (its end, `break` or an exception).
  static void leave_training_loop(FabricCore& core);
  /// The current epoch's earlier stretches at other world sizes (a run that
  /// resumed it at another world size): for DistributedSampler::resume_epoch.
  static std::vector<data::DistributedSampler::Stretch> epoch_stretches(FabricCore& core);
  /// Where the next training pass starts: resumes from the checkpoint first
  /// (once), as begin_training_pass does, but resets nothing. Returns the
  /// epoch and the position.
  static std::pair<int64_t, int64_t> next_training_pass(FabricCore& core);
  /// A training pass of `total` batches on this rank, `done` of them
  /// already (a resumed epoch), starts: the Fabric's progress.
  static void start_training_progress(FabricCore& core, int64_t total, int64_t done);
  /// After the training batch that ended at position `end` of a shard of
  /// `shard_size` indices, `real_samples` of its samples not padding: one
  /// more step; progress; saves when the schedule says so.
  static void end_training_batch(FabricCore& core, int64_t end, int64_t shard_size,
                                 int64_t real_samples);
  /// The training batch [start, end) of a shard of `shard_size` indices is
  /// handed to the loop body (under no_sync() when it accumulates).
  static void begin_training_batch(FabricCore& core, int64_t start, int64_t end, int64_t shard_size);
  /// The training loader used its whole shard: DDP join, next epoch.
  static void end_training_pass(FabricCore& core, int64_t epoch);
  /// Where the batches' tensors go (device, and dtype under bf16-true).
  static BatchTarget batch_target(FabricCore& core);
  /// The autocast scope of a batch's loop body under a mixed precision
  /// (FabricOptions::precision), held while the body runs; null otherwise.
  static std::shared_ptr<void> autocast(FabricCore& core);
};

inline torch::Tensor move_batch(torch::Tensor batch, const BatchTarget& to) { return to(batch); }
inline torch::data::Example<> move_batch(torch::data::Example<> batch, const BatchTarget& to) {
  return {to(batch.data), to(batch.target)};
}
/// Other batch types are left where the dataset put them.
template <typename Batch>
Batch move_batch(Batch batch, const BatchTarget&) {
  return batch;
}

/// This rank's batches of a torch::data batch dataset: `dataset.get_batch(indices)` for each
/// `batch_size` indices of its DistributedSampler shard, moved by BatchTarget, read in the
/// calling thread. Training loader: each pass is one epoch (set_epoch for you, resumed
/// mid-epoch, a step per batch, checkpoints on schedule, padded). Evaluation loader: each
/// sample once across ranks, unpadded (padded under fsdp): no collective in its loop. Mixed
/// precisions autocast each loop body. One pass at a time. See docs/fabric.md.
template <typename Dataset>
class FabricLoader {
 public:
  using Batch = typename Dataset::BatchType;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    explicit Iterator(FabricLoader* loader)
        : loader_(loader), pass_(loader == nullptr ? nullptr : loader->pass_scope()) {}
    Batch& operator*() const { return loader_->batch_; }
    Batch* operator->() const { return &loader_->batch_; }
    Iterator& operator++() {
      loader_->advance();
      return *this;
    }
    /// Only comparison with end() is meaningful.
    bool operator==(const Iterator& other) const { return done() == other.done(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    bool done() const { return loader_ == nullptr || loader_->done_; }
    FabricLoader* loader_;
    std::shared_ptr<void> pass_;  // ends the batch's autocast with the loop
  };

  FabricLoader(std::shared_ptr<FabricCore> core, Dataset dataset, int64_t batch_size,
               data::DistributedSamplerOptions sampler_options, bool training)
      : core_(std::move(core)),
        dataset_(std::move(dataset)),
        batch_size_(batch_size),
        sampler_(static_cast<int64_t>(dataset_.size().value()), sampler_options),
        training_(training) {}

  /// Starts a pass (see the class comment). Training loader: collective in
  /// effect (a resumed run restores its checkpoint here on every rank, and
  /// the batches that follow run DDP).
  Iterator begin(std::source_location loop = std::source_location::current()) {
    if (training_) {
      const auto [epoch, position] = LoaderHooks::begin_training_pass(*core_, loop);
      epoch_ = epoch;
      position_ = position;
    } else {
      epoch_ = LoaderHooks::epoch(*core_);
      position_ = 0;
    }
    autocast_.reset();
    sampler_.set_epoch(epoch_);
    if (training_) {
      auto stretches = LoaderHooks::epoch_stretches(*core_);
      if (!stretches.empty()) sampler_.resume_epoch(std::move(stretches));
    }
    indices_ = sampler_.indices();
    padding_ = sampler_.is_padding();
    done_ = false;
    if (training_) {
      const PassSteps steps = pass_steps(static_cast<int64_t>(indices_.size()), position_);
      LoaderHooks::start_training_progress(*core_, steps.total, steps.done);
    }
    load_from(position_);
    return Iterator(this);
  }
  Iterator end() { return Iterator(nullptr); }

  /// Which samples of the current batch are padding duplicates (an
  /// evaluation loader has none, except under fsdp): pass it to a metric's update().
  metrics::PaddingMask padding_mask() const {
    return metrics::PaddingMask(padding_, position_, batch_end_ - position_);
  }
  /// Samples of the current batch that are not padding duplicates: what a
  /// throughput or a sample count should add up (summed over ranks, every
  /// sample of the dataset counts once per epoch).
  int64_t num_real_samples() const {
    return std::count(padding_.begin() + position_, padding_.begin() + batch_end_, false);
  }
  /// Batches of the training pass the next begin() starts on this rank: `total`, and `done`
  /// already (resumed mid-epoch at the same world size; at another, the rest of the epoch is
  /// dealt anew: done 0). For ProgressBar::start_epoch(e, n, total, done). Call before the
  /// pass; it restores a pending checkpoint as begin() would. Evaluation loader: {0, size()}.
  struct PassSteps {
    int64_t done = 0;
    int64_t total = 0;
  };
  PassSteps next_pass() {
    if (!training_) return {0, size()};
    const auto [epoch, position] = LoaderHooks::next_training_pass(*core_);
    data::DistributedSampler sampler = sampler_;
    sampler.set_epoch(epoch);
    auto stretches = LoaderHooks::epoch_stretches(*core_);
    if (!stretches.empty()) sampler.resume_epoch(std::move(stretches));
    return pass_steps(sampler.num_samples(), position);
  }
  /// Batches per pass on this rank.
  int64_t size() const { return pass_steps(sampler_.num_samples(), 0).total; }
  /// Indices of this rank's shard per pass.
  int64_t num_samples() const { return sampler_.num_samples(); }
  /// Samples in the whole dataset.
  int64_t dataset_size() const { return static_cast<int64_t>(dataset_.size().value()); }
  int64_t batch_size() const { return batch_size_; }
  const data::DistributedSampler& sampler() const { return sampler_; }

 private:
  // A pass over `shard` samples, `position` of them already seen.
  PassSteps pass_steps(int64_t shard, int64_t position) const {
    const int64_t total = (shard + batch_size_ - 1) / batch_size_;
    return {std::min(total, (position + batch_size_ - 1) / batch_size_), total};
  }
  void load_from(int64_t position) {
    position_ = position;
    const auto shard = static_cast<int64_t>(indices_.size());
    if (position_ >= shard) {
      finish();
      return;
    }
    batch_end_ = std::min(shard, position_ + batch_size_);
    std::vector<size_t> batch(indices_.begin() + position_, indices_.begin() + batch_end_);
    batch_ = move_batch(dataset_.get_batch(batch), LoaderHooks::batch_target(*core_));
    if (training_) LoaderHooks::begin_training_batch(*core_, position_, batch_end_, shard);
    autocast_ = LoaderHooks::autocast(*core_);
  }
  void advance() {
    autocast_.reset();
    if (done_) return;
    if (training_) {
      LoaderHooks::end_training_batch(*core_, batch_end_, static_cast<int64_t>(indices_.size()),
                                      num_real_samples());
    }
    load_from(batch_end_);
  }
  // Held by the pass's iterators: when the last one goes, so does the autocast.
  std::shared_ptr<void> pass_scope() {
    return std::shared_ptr<void>(nullptr, [this](void*) {
      autocast_.reset();
      if (training_) LoaderHooks::leave_training_loop(*core_);
    });
  }
  void finish() {
    autocast_.reset();
    done_ = true;
    batch_ = Batch();
    if (training_) LoaderHooks::end_training_pass(*core_, epoch_);
  }

  std::shared_ptr<FabricCore> core_;
  Dataset dataset_;
  int64_t batch_size_;
  data::DistributedSampler sampler_;
  bool training_;
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
  std::vector<bool> padding_;
  int64_t position_ = 0;
  int64_t batch_end_ = 0;
  bool done_ = true;
  Batch batch_;
  std::shared_ptr<void> autocast_;  // the current batch's (mixed precision)
};

}  // namespace rankwise::fabric
