#pragma once
/// \file data_loader_sampler.h
/// DistributedSampler for libtorch's data loaders
/// (torch::data::make_data_loader), with the same index lists as
/// PyTorch's torch.utils.data.distributed.DistributedSampler.

#include <torch/data/samplers/base.h>
#include <torch/serialize/archive.h>

#include "rankwise/data/distributed_sampler.h"

namespace rankwise::data {

/// A torch::data::samplers::Sampler yielding this rank's indices of the current epoch
/// (DistributedSampler::indices()) in batches. Call set_epoch() before each epoch on every rank
/// (a repeated shuffled pass warns once, on rank 0); libtorch copies the sampler, so build a
/// loader per epoch. reset() rewinds the epoch (reset(n): new dataset size); save()/load() keep
/// the epoch and position. E.g. make_data_loader(dataset.map(Stack<>()), sampler, options).
class DataLoaderSampler : public torch::data::samplers::Sampler<> {
 public:
  explicit DataLoaderSampler(int64_t dataset_size, DistributedSamplerOptions options = {})
      : dataset_size_(dataset_size),
        options_(options),
        sampler_(dataset_size, options),
        indices_(sampler_.compute_indices()) {}

  void set_epoch(int64_t epoch) {
    sampler_.set_epoch(epoch);
    indices_ = sampler_.compute_indices();
    position_ = 0;
  }
  const DistributedSampler& sampler() const { return sampler_; }

  void reset(c10::optional<size_t> new_size = c10::nullopt) override {
    if (new_size) {
      const auto epoch = sampler_.epoch();
      dataset_size_ = static_cast<int64_t>(*new_size);
      sampler_ = DistributedSampler(dataset_size_, options_);
      sampler_.set_epoch(epoch);
    }
    // The data loader resets its sampler at the start of every pass.
    repeated_epoch_.pass_started("DataLoaderSampler", sampler_.shuffle(), sampler_.epoch());
    indices_ = sampler_.compute_indices();
    position_ = 0;
  }

  c10::optional<std::vector<size_t>> next(size_t batch_size) override {
    if (position_ >= indices_.size()) return c10::nullopt;
    const auto end = std::min(indices_.size(), position_ + batch_size);
    std::vector<size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                              indices_.begin() + static_cast<std::ptrdiff_t>(end));
    position_ = end;
    return batch;
  }

  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("epoch", torch::tensor(sampler_.epoch(), torch::kInt64), /*is_buffer=*/true);
    archive.write("position", torch::tensor(static_cast<int64_t>(position_), torch::kInt64),
                  /*is_buffer=*/true);
  }

  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor epoch, position;
    archive.read("epoch", epoch, /*is_buffer=*/true);
    archive.read("position", position, /*is_buffer=*/true);
    sampler_.set_epoch(epoch.item<int64_t>());
    indices_ = sampler_.compute_indices();
    position_ = static_cast<size_t>(position.item<int64_t>());
  }

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  DistributedSampler sampler_;
  std::vector<int64_t> indices_;
  size_t position_ = 0;
  detail::RepeatedEpochGuard repeated_epoch_;
};

}  // namespace rankwise::data
