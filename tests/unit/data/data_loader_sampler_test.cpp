#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rankwise/data/data_loader_sampler.h"

namespace {

// A data set whose example i is the tensor [i], so a loader reveals the indices it drew.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset, torch::Tensor> {
  explicit IndexDataset(size_t n) : n_(n) {}
  torch::Tensor get(size_t index) override { return torch::tensor({static_cast<int64_t>(index)}); }
  c10::optional<size_t> size() const override { return n_; }
  size_t n_;
};

std::vector<int64_t> drawn(rankwise::data::DataLoaderSampler sampler, size_t n, size_t batch) {
  auto loader = torch::data::make_data_loader(
      IndexDataset(n), std::move(sampler), torch::data::DataLoaderOptions(batch));
  std::vector<int64_t> result;
  for (auto& examples : *loader) {
    for (auto& t : examples) result.push_back(t.item<int64_t>());
  }
  return result;
}

}  // namespace

TEST(DataLoaderSampler, LoaderDrawsTheSamplersIndices) {
  for (int rank = 0; rank < 3; ++rank) {
    auto options = rankwise::data::DistributedSamplerOptions().num_replicas(3).rank(rank).seed(7);
    rankwise::data::DataLoaderSampler sampler(10, options);
    sampler.set_epoch(2);
    rankwise::data::DistributedSampler reference(10, options);
    reference.set_epoch(2);
    EXPECT_EQ(drawn(sampler, 10, 3), reference.indices()) << "rank " << rank;
  }
}

TEST(DataLoaderSampler, SaveAndLoadKeepEpochAndPosition) {
  auto options = rankwise::data::DistributedSamplerOptions().num_replicas(2).rank(1);
  rankwise::data::DataLoaderSampler sampler(20, options);
  sampler.set_epoch(3);
  auto first = sampler.next(4).value();
  torch::serialize::OutputArchive out;
  sampler.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  auto rest = sampler.next(100).value();

  rankwise::data::DataLoaderSampler restored(20, options);
  std::istringstream in_bytes(bytes.str());
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  restored.load(in);
  EXPECT_EQ(restored.next(100).value(), rest);
  EXPECT_EQ(first.size() + rest.size(), 10u);
  EXPECT_FALSE(restored.next(1).has_value());
}
