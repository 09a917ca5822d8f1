#pragma once
/// \file distributed_sampler.h
/// Which sample indices each rank sees: torch.utils.data.distributed.
/// DistributedSampler's semantics (PyTorch 1.13), plus a record of which
/// indices are padding.

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace rankwise::data {

/// Options, with PyTorch's names and defaults (setters and getters as torch::nn options),
/// e.g. DistributedSamplerOptions().seed(42).drop_last(true).
struct DistributedSamplerOptions {
  /// Number of ranks sharing the data (default: the world size).
  TORCH_ARG(std::optional<int>, num_replicas);
  /// This rank (default: the global rank).
  TORCH_ARG(std::optional<int>, rank);
  /// Shuffle with a generator seeded with seed + epoch (torch.randperm).
  TORCH_ARG(bool, shuffle) = true;
  TORCH_ARG(uint64_t, seed) = 0;
  /// Drop the tail so that every rank gets the same count without padding.
  TORCH_ARG(bool, drop_last) = false;
  /// false selects evaluation mode: no padding, every sample exactly once
  /// across ranks, shard lengths differing by at most one. (Not in PyTorch.)
  TORCH_ARG(bool, pad) = true;
};

namespace detail {
/// Remembers the epoch of a sampler's last pass and, when a shuffled pass
/// starts again with the same epoch number (set_epoch() forgotten), writes a
/// warning to stderr on rank 0, once per guard.
class RepeatedEpochGuard {
 public:
  /// A pass of `sampler` (its class name, for the message) starts at `epoch`.
  void pass_started(const char* sampler, bool shuffle, int64_t epoch);

 private:
  std::optional<int64_t> last_epoch_;
  bool warned_ = false;
};
}  // namespace detail

/// Splits [0, dataset_size) across ranks with PyTorch's Python index lists (not libtorch's
/// torch::data::samplers::DistributedSampler; DataLoaderSampler wraps it for torch::data).
/// With pad (default) each rank gets ceil(N / R) indices (drop_last: floor), the list extended
/// by repeating its head (is_padding() marks those); rank r takes positions r, r + R, ...
/// pad(false): shards differ by up to one, so run no collective inside such a loop.
/// See docs/ddp-and-zero.md#the-data-distributedsampler.
class DistributedSampler {
 public:
  /// Throws ConfigError when rank is not in [0, num_replicas).
  explicit DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});

  /// Sets the epoch, so each epoch is shuffled differently (call on every
  /// rank). Another epoch than the current one also ends a resume_epoch().
  void set_epoch(int64_t epoch) {
    if (epoch != epoch_) stretches_.clear();
    epoch_ = epoch;
  }

  /// One stretch of an epoch that ran before a checkpoint: `num_replicas`
  /// ranks each consumed `per_rank` indices of it.
  struct Stretch {
    int num_replicas = 1;
    int64_t per_rank = 0;
  };

  /// Resumes the current epoch (set_epoch() first) at this world size, which may differ from
  /// the checkpoint's; `before`: the epoch's earlier stretches, in order. What they did not
  /// consume (padding aside) is padded anew and dealt as PyTorch deals, each sample once
  /// (drop_last: each stretch drops its tail); indices() etc. then describe the rest. Throws
  /// ConfigError naming a stretch with num_replicas < 1 or per_rank < 0 or beyond its share.
  /// See docs/checkpoints.md#an-epoch-resumed-at-another-world-size.
  void resume_epoch(std::vector<Stretch> before);
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch. With shuffle, a second call
  /// for the same epoch number (set_epoch() forgotten: every epoch would get
  /// the same order) writes a warning to stderr, once per sampler, on rank 0.
  std::vector<int64_t> indices() const;
  /// For each of indices(): true when it is a padding duplicate.
  std::vector<bool> is_padding() const;
  /// Length of this rank's shard.
  int64_t num_samples() const;
  /// Padded length of the whole list (num_samples * num_replicas in pad mode).
  int64_t total_size() const;
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }
  bool shuffle() const { return options_.shuffle(); }

 private:
  friend class DataLoaderSampler;  // computes passes' indices without the warning
  std::vector<int64_t> compute_indices() const;
  // Positions into the (possibly padded) permuted list, for this rank.
  std::vector<int64_t> positions() const;
  std::vector<int64_t> permutation() const;

  // This stretch's list: the permutation, or what earlier stretches left
  // (without padding); stretch_size() is its length, without the permutation.
  std::vector<int64_t> stretch_list() const;
  int64_t stretch_size() const;

  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  std::vector<Stretch> stretches_;  // resume_epoch()
  int num_replicas_;
  int rank_;
  int64_t epoch_ = 0;
  mutable detail::RepeatedEpochGuard repeated_epoch_;
};

}  // namespace rankwise::data
