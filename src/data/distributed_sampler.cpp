#include "rankwise/data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>

#include "core/check.h"
#include "util/io.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size),
      options_(options),
      num_replicas_(options.num_replicas().value_or(rankwise::dist::world_size())),
      rank_(options.rank().value_or(rankwise::dist::rank())) {
  RANKWISE_CHECK(dataset_size_ >= 0, ConfigError, "DistributedSampler: negative dataset size");
  RANKWISE_CHECK(num_replicas_ >= 1, ConfigError,
                 "DistributedSampler: num_replicas must be >= 1, got {}", num_replicas_);
  RANKWISE_CHECK(rank_ >= 0 && rank_ < num_replicas_, ConfigError,
                 "DistributedSampler: invalid rank {}, rank should be in the interval [0, {}]",
                 rank_, num_replicas_ - 1);
}

namespace {
// PyTorch's shares of n indices over r ranks (pad mode): ceil(n / r) each,
// floor with drop_last.
int64_t padded_share(int64_t n, int64_t r, bool drop_last) {
  return drop_last && n % r != 0 ? n / r : (n + r - 1) / r;
}

// How many of a stretch's n indices its r ranks deal out: all, or with
// drop_last PyTorch's truncated total.
int64_t dealt(int64_t n, int64_t r, const DistributedSamplerOptions& o) {
  return o.pad() && o.drop_last() ? padded_share(n, r, true) * r : n;
}
}  // namespace

int64_t DistributedSampler::num_samples() const {
  const int64_t n = stretch_size(), r = num_replicas_;
  if (!options_.pad()) return n / r + (rank_ < n % r ? 1 : 0);
  return padded_share(n, r, options_.drop_last());
}

int64_t DistributedSampler::total_size() const {
  const int64_t n = stretch_size();
  if (!options_.pad()) return n;
  return padded_share(n, num_replicas_, options_.drop_last()) * num_replicas_;
}

void DistributedSampler::resume_epoch(std::vector<Stretch> before) {
  stretches_.clear();  // a refused list leaves none behind
  int64_t n = dataset_size_;
  for (std::size_t k = 0; k < before.size(); ++k) {
    const Stretch& s = before[k];
    RANKWISE_CHECK(
        s.num_replicas >= 1, ConfigError,
        "DistributedSampler::resume_epoch: stretch {} has num_replicas {}; it must be at least 1",
        k, s.num_replicas);
    const int64_t share = options_.pad() ? padded_share(n, s.num_replicas, options_.drop_last())
                                         : (n + s.num_replicas - 1) / s.num_replicas;
    RANKWISE_CHECK(s.per_rank >= 0 && s.per_rank <= share, ConfigError,
                   "DistributedSampler::resume_epoch: stretch {} consumed {} indices per rank, but "
                   "{} ranks share {} indices there ({} per rank)",
                   k, s.per_rank, s.num_replicas, n, share);
    n = std::max<int64_t>(0, dealt(n, s.num_replicas, options_) - s.num_replicas * s.per_rank);
  }
  stretches_ = std::move(before);
}

int64_t DistributedSampler::stretch_size() const {
  int64_t n = dataset_size_;
  for (const Stretch& s : stretches_) {
    n = std::max<int64_t>(0, dealt(n, s.num_replicas, options_) - s.num_replicas * s.per_rank);
  }
  return n;
}

std::vector<int64_t> DistributedSampler::stretch_list() const {
  std::vector<int64_t> list = permutation();
  for (const Stretch& s : stretches_) {
    const int64_t kept = dealt(static_cast<int64_t>(list.size()), s.num_replicas, options_);
    const int64_t consumed = std::min(kept, s.num_replicas * s.per_rank);
    list = std::vector<int64_t>(list.begin() + consumed, list.begin() + kept);
  }
  return list;
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

void data::detail::RepeatedEpochGuard::pass_started(const char* sampler, bool shuffle, int64_t epoch) {
  const bool repeated = shuffle && last_epoch_ == epoch && !warned_;
  last_epoch_ = epoch;
  if (!repeated) return;
  warned_ = true;
  if (!is_rank_zero()) return;
  util::write_line(
      STDERR_FILENO,
      core::message(
          "warning: {}: epoch {} started again without set_epoch(): every such epoch repeats the "
          "same shuffled order; call set_epoch(epoch) on every rank before each epoch, as with "
          "PyTorch's DistributedSampler (this warning is shown once)",
          sampler, epoch));
}

std::vector<int64_t> DistributedSampler::indices() const {
  repeated_epoch_.pass_started("DistributedSampler", options_.shuffle(), epoch_);
  return compute_indices();
}

std::vector<int64_t> DistributedSampler::compute_indices() const {
  const auto order = stretch_list();
  const auto n = static_cast<int64_t>(order.size());
  std::vector<int64_t> result;
  if (n == 0) return result;
  for (int64_t p : positions()) result.push_back(order[static_cast<std::size_t>(p % n)]);
  return result;
}

std::vector<bool> DistributedSampler::is_padding() const {
  const auto n = static_cast<int64_t>(stretch_list().size());
  std::vector<bool> result;
  for (int64_t p : positions()) result.push_back(p >= n);
  return result;
}

}  // namespace rankwise::data
