#include <gtest/gtest.h>

#include <set>

#include "rankwise/data/distributed_sampler.h"
#include "rankwise/error.h"

using rankwise::DistributedSampler;
using rankwise::DistributedSamplerOptions;

namespace {
DistributedSampler make(int64_t n, int replicas, int rank, bool shuffle = false,
                        bool drop_last = false, bool pad = true) {
  return DistributedSampler(n, DistributedSamplerOptions()
                                   .num_replicas(replicas)
                                   .rank(rank)
                                   .shuffle(shuffle)
                                   .drop_last(drop_last)
                                   .pad(pad));
}
}  // namespace

// Expected lists follow torch.utils.data.DistributedSampler's code (1.13):
// pad by repeating the head, then take indices[rank::num_replicas].
TEST(DistributedSampler, PadsByRepeatingTheHead) {
  EXPECT_EQ(make(10, 3, 0).indices(), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(make(10, 3, 1).indices(), (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(make(10, 3, 2).indices(), (std::vector<int64_t>{2, 5, 8, 1}));
  EXPECT_EQ(make(10, 3, 1).is_padding(), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(make(10, 3, 0).is_padding(), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(make(10, 3, 2).num_samples(), 4);
  EXPECT_EQ(make(10, 3, 2).total_size(), 12);
}

TEST(DistributedSampler, PaddingLongerThanData) {
  // 2 samples on 5 ranks: the list [0,1] repeats to [0,1,0,1,0].
  std::vector<int64_t> all;
  int padded = 0;
  for (int r = 0; r < 5; ++r) {
    auto s = make(2, 5, r);
    auto idx = s.indices();
    ASSERT_EQ(idx.size(), 1u);
    all.push_back(idx[0]);
    padded += s.is_padding()[0];
  }
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 0, 1, 0}));
  EXPECT_EQ(padded, 3);
}

TEST(DistributedSampler, DropLast) {
  EXPECT_EQ(make(10, 3, 0, false, true).indices(), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(make(10, 3, 2, false, true).indices(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(make(10, 3, 2, false, true).num_samples(), 3);
}

TEST(DistributedSampler, EvaluationModeCoversEachSampleOnce) {
  for (int replicas = 1; replicas <= 4; ++replicas) {
    std::multiset<int64_t> seen;
    for (int r = 0; r < replicas; ++r) {
      auto s = make(10, replicas, r, /*shuffle=*/true, false, /*pad=*/false);
      auto idx = s.indices();
      EXPECT_EQ(static_cast<int64_t>(idx.size()), s.num_samples());
      for (bool p : s.is_padding()) EXPECT_FALSE(p);
      seen.insert(idx.begin(), idx.end());
    }
    EXPECT_EQ(seen.size(), 10u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u);
  }
}

TEST(DistributedSampler, ShuffleDependsOnEpochAndSeed) {
  auto s = make(100, 2, 0, true);
  auto e0 = s.indices();
  s.set_epoch(1);
  auto e1 = s.indices();
  EXPECT_NE(e0, e1);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), e0);
  // Two ranks together hold every index exactly once (100 divides evenly).
  auto other = make(100, 2, 1, true).indices();
  std::set<int64_t> all(e0.begin(), e0.end());
  all.insert(other.begin(), other.end());
  EXPECT_EQ(all.size(), 100u);
}

TEST(DistributedSampler, InvalidRank) {
  try {
    make(10, 2, 2);
    FAIL();
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid rank 2"), std::string::npos);
  }
  EXPECT_THROW(make(10, 0, 0), rankwise::ConfigError);
}
