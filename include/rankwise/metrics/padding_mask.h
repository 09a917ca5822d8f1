#pragma once
/// \file padding_mask.h
/// Which samples of a batch a metric leaves out: the padding duplicates of
/// DistributedSampler (see data/distributed_sampler.h). metrics/metric.h
/// includes this header; every update() of the metrics takes a PaddingMask.

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rankwise::metrics {

/// Which samples of a batch are padding duplicates that a metric must leave
/// out: DistributedSampler (pad mode, PyTorch's default) repeats the head of
/// the index list so every rank gets the same count; is_padding() marks those
/// repeats. `true` means "padding: do not count". An empty mask (the default)
/// counts every sample.
class PaddingMask {
 public:
  /// No padding: every sample counts.
  PaddingMask() = default;
  /// A bool tensor [N], one entry per sample of the batch (true = padding).
  /// Other dtypes are accepted when they hold only 0 and 1.
  PaddingMask(torch::Tensor is_padding);  // NOLINT(google-explicit-constructor)
  /// Entries as returned by DistributedSampler::is_padding(), for the batch.
  PaddingMask(const std::vector<bool>& is_padding);  // NOLINT(google-explicit-constructor)
  /// Entries [offset, offset + length) of a whole shard's is_padding(), i.e.
  /// the mask of the batch that holds those positions of the shard. Throws
  /// ConfigError when the range is outside the vector.
  PaddingMask(const std::vector<bool>& shard_is_padding, int64_t offset, int64_t length);

  /// True when no mask was given.
  bool empty() const { return !mask_.defined(); }
  /// Bool tensor [n]: true for samples to count. Throws ConfigError (naming
  /// `who`) when the mask has a length other than n.
  torch::Tensor keep(int64_t n, const std::string& who) const;

 private:
  torch::Tensor mask_;  // bool [N], true = padding; undefined = none
};

}  // namespace rankwise::metrics
