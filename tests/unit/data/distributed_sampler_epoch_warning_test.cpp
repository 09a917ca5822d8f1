// A second epoch that starts with the same epoch number (set_epoch forgotten)
// is warned about once, for the raw DistributedSampler and for the
// torch::data sampler; correct use and unshuffled samplers stay silent.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rankwise/data/data_loader_sampler.h"
#include "rankwise/data/distributed_sampler.h"

namespace {

const char* const kWarning = "epoch 0 started again without set_epoch()";

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct IndexDataset : torch::data::datasets::Dataset<IndexDataset, torch::Tensor> {
  torch::Tensor get(size_t index) override { return torch::tensor({static_cast<int64_t>(index)}); }
  c10::optional<size_t> size() const override { return 8; }
};

// Passes over one loader; with set_epoch, a fresh loader per epoch (libtorch
// copies the sampler into the loader).
std::string passes(bool call_set_epoch, bool shuffle) {
  auto options = rankwise::data::DistributedSamplerOptions().num_replicas(2).rank(0).shuffle(shuffle);
  testing::internal::CaptureStderr();
  if (call_set_epoch) {
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      rankwise::data::DataLoaderSampler sampler(8, options);
      sampler.set_epoch(epoch);
      auto loader = torch::data::make_data_loader(IndexDataset(), sampler, 2);
      for (auto& batch : *loader) (void)batch;
    }
  } else {
    auto loader =
        torch::data::make_data_loader(IndexDataset(), rankwise::data::DataLoaderSampler(8, options), 2);
    for (int epoch = 0; epoch < 3; ++epoch) {
      for (auto& batch : *loader) (void)batch;
    }
  }
  return testing::internal::GetCapturedStderr();
}

}  // namespace

TEST(RepeatedEpochWarning, RawSamplerWarnsOnceWhenAnEpochStartsAgain) {
  rankwise::data::DistributedSampler sampler(10, rankwise::data::DistributedSamplerOptions().num_replicas(2).rank(0));
  testing::internal::CaptureStderr();
  const auto first = sampler.indices();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // the first epoch is fine
  testing::internal::CaptureStderr();
  EXPECT_EQ(sampler.indices(), first);  // the same order again: what the warning is about
  sampler.indices();
  const auto err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, kWarning), 1) << err;
  EXPECT_NE(err.find("call set_epoch(epoch) on every rank before each epoch"), std::string::npos) << err;
}

TEST(RepeatedEpochWarning, RawSamplerWithSetEpochOrWithoutShuffleIsSilent) {
  rankwise::data::DistributedSampler sampler(10, rankwise::data::DistributedSamplerOptions().num_replicas(2).rank(0));
  rankwise::data::DistributedSampler ordered(
      10, rankwise::data::DistributedSamplerOptions().num_replicas(2).rank(0).shuffle(false));
  testing::internal::CaptureStderr();
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    sampler.indices();
    ordered.indices();  // no shuffle: the epoch does not matter
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(RepeatedEpochWarning, DataLoaderReusedWithoutSetEpochWarnsOnce) {
  const auto err = passes(/*call_set_epoch=*/false, /*shuffle=*/true);
  EXPECT_EQ(count(err, "DataLoaderSampler: " + std::string(kWarning)), 1) << err;
  EXPECT_EQ(passes(/*call_set_epoch=*/true, /*shuffle=*/true), "");
  EXPECT_EQ(passes(/*call_set_epoch=*/false, /*shuffle=*/false), "");
}
