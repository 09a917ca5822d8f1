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

/// Options, with PyTorch's names and defaults (setters and getters as
/// torch::nn options).
///
/// Example:
/// \code
///   rankwise::data::DistributedSampler sampler(
///       dataset_size, rankwise::data::DistributedSamplerOptions().seed(42).drop_last(true));
/// \endcode
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

/// Splits [0, dataset_size) across ranks.
///
/// Not libtorch's torch::data::samplers::DistributedSampler (the base of
/// its DistributedRandomSampler, whose index order differs from Python's):
/// this class gives PyTorch's Python index lists and is not a torch::data
/// sampler itself (DataLoaderSampler wraps it for torch::data loaders). The
/// two names live in different namespaces, so qualified uses never collide;
/// a file that uses both must not bring in both namespaces with
/// `using namespace` (the unqualified name would then be ambiguous, a
/// compile error, never a silent mix-up).
///
/// With pad (the default, PyTorch's behaviour) every rank gets num_samples()
/// = ceil(N / R) indices (drop_last: floor), the shuffled list being extended
/// by repeating its head; is_padding() marks those repeats so metrics can
/// leave them out. Rank r takes positions r, r + R, r + 2R, ... of the list.
/// In evaluation mode (pad(false)) shards differ in length by one, so a loop
/// over them runs a different number of steps per rank: run no collective
/// inside such a loop (reduce metric states after it).
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

  /// Resumes the current epoch (set_epoch() first) where a checkpoint left
  /// it, at this sampler's world size, which may differ from the one that
  /// took it. `before` lists the epoch's earlier stretches in order (one per
  /// run that took part; several after repeated resumes). Each stretch at W
  /// ranks of p indices consumed the first W * p entries of that stretch's
  /// list, PyTorch's list (its own padding aside) for the first; what was not
  /// consumed, without padding duplicates, is the next stretch's list,
  /// padded anew for this world size (is_padding() marks the duplicates) and
  /// dealt as PyTorch deals it (rank r takes positions r, r + R, ...). So
  /// every sample of the epoch is seen exactly once over all stretches,
  /// padding aside; with drop_last each stretch drops its own tail (PyTorch's
  /// rule applied to what is left). indices(), is_padding(), num_samples()
  /// and total_size() then describe the rest of the epoch. Throws
  /// ConfigError naming the stretch when num_replicas < 1 or per_rank is
  /// negative or more than that stretch's share.
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
