#include "rankwise/data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include "detail/check.h"
#include "detail/write_line.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "rankwise/process_group.h"

namespace rankwise {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size),
      options_(options),
      num_replicas_(options.num_replicas().value_or(rankwise::world_size())),
      rank_(options.rank().value_or(rankwise::rank())) {
  RANKWISE_CHECK(dataset_size_ >= 0, ConfigError,
                 "rankwise: DistributedSampler: negative dataset size");
  RANKWISE_CHECK(num_replicas_ >= 1, ConfigError,
                 "rankwise: DistributedSampler: num_replicas must be >= 1, got {}", num_replicas_);
  RANKWISE_CHECK(rank_ >= 0 && rank_ < num_replicas_, ConfigError,
                 "rankwise: DistributedSampler: invalid rank {}, rank should be in the interval "
                 "[0, {}]",
                 rank_, num_replicas_ - 1);
}

int64_t DistributedSampler::num_samples() const {
  const int64_t n = dataset_size_, r = num_replicas_;
  if (!options_.pad()) return n / r + (rank_ < n % r ? 1 : 0);
  if (options_.drop_last() && n % r != 0) return (n - r + r - 1) / r;  // ceil((n - r) / r)
  return (n + r - 1) / r;
}

int64_t DistributedSampler::total_size() const {
  if (!options_.pad()) return dataset_size_;
  const int64_t n = dataset_size_, r = num_replicas_;
  const int64_t per_rank =
      (options_.drop_last() && n % r != 0) ? (n - r + r - 1) / r : (n + r - 1) / r;
  return per_rank * r;
}

std::vector<int64_t> DistributedSampler::permutation() const {
  std::vector<int64_t> order(static_cast<std::size_t>(dataset_size_));
  if (options_.shuffle()) {
    // Same as Python: g = torch.Generator(); g.manual_seed(seed + epoch); torch.randperm(n, generator=g)
    auto generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed() +
                                                              static_cast<uint64_t>(epoch_));
    auto perm = torch::randperm(dataset_size_, generator, torch::kInt64);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + dataset_size_, order.begin());
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order[static_cast<std::size_t>(i)] = i;
  }
  return order;
}

std::vector<int64_t> DistributedSampler::positions() const {
  std::vector<int64_t> result;
  const int64_t total = total_size();
  for (int64_t p = rank_; p < total; p += num_replicas_) result.push_back(p);
  return result;
}

void detail::RepeatedEpochGuard::pass_started(const char* sampler, bool shuffle, int64_t epoch) {
  const bool repeated = shuffle && last_epoch_ == epoch && !warned_;
  last_epoch_ = epoch;
  if (!repeated) return;
  warned_ = true;
  if (!is_rank_zero()) return;
  detail::write_line(STDERR_FILENO,
                     fmt::format("rankwise: warning: {}: epoch {} started again without "
                                 "set_epoch(): every such epoch repeats the same shuffled order; "
                                 "call set_epoch(epoch) on every rank before each epoch, as with "
                                 "PyTorch's DistributedSampler (this warning is shown once)",
                                 sampler, epoch));
}

std::vector<int64_t> DistributedSampler::indices() const {
  repeated_epoch_.pass_started("DistributedSampler", options_.shuffle(), epoch_);
  return compute_indices();
}

std::vector<int64_t> DistributedSampler::compute_indices() const {
  const auto order = permutation();
  std::vector<int64_t> result;
  if (dataset_size_ == 0) return result;
  for (int64_t p : positions()) result.push_back(order[static_cast<std::size_t>(p % dataset_size_)]);
  return result;
}

std::vector<bool> DistributedSampler::is_padding() const {
  std::vector<bool> result;
  for (int64_t p : positions()) result.push_back(p >= dataset_size_);
  return result;
}

}  // namespace rankwise
