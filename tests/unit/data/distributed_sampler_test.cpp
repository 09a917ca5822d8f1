#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "rankwise/data/distributed_sampler.h"
#include "rankwise/error.h"

using rankwise::data::DistributedSampler;
using rankwise::data::DistributedSamplerOptions;

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

namespace {
using Stretch = DistributedSampler::Stretch;

DistributedSampler shuffled(int64_t n, int replicas, int rank, bool drop_last = false) {
  DistributedSampler s(n, DistributedSamplerOptions()
                              .num_replicas(replicas)
                              .rank(rank)
                              .seed(7)
                              .drop_last(drop_last));
  s.set_epoch(3);
  return s;
}

// The first `per_rank` indices of every rank of a `replicas`-rank run, as
// the run itself saw them (its samplers' indices(), no padding), appended.
void seen_by(std::vector<DistributedSampler>& ranks, int64_t per_rank,
             std::vector<int64_t>& seen) {
  for (auto& s : ranks) {
    const auto idx = s.indices();
    const auto pad = s.is_padding();
    for (int64_t j = 0; j < per_rank; ++j) {
      if (!pad[static_cast<std::size_t>(j)]) seen.push_back(idx[static_cast<std::size_t>(j)]);
    }
  }
}

std::vector<DistributedSampler> ranks_of(int64_t n, int replicas, std::vector<Stretch> before,
                                         bool drop_last = false) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < replicas; ++r) {
    ranks.push_back(shuffled(n, replicas, r, drop_last));
    ranks.back().resume_epoch(before);
  }
  return ranks;
}
}  // namespace

// Issue 16's case: a checkpoint taken mid-epoch at 4 ranks resumes at 3; the
// samples seen in that epoch, both runs together, are each sample exactly
// once (padding aside), whatever the position; also 4 -> 3 -> 2.
TEST(DistributedSampler, ResumedAtAnotherWorldSizeEverySampleOnce) {
  for (const int64_t n : {10, 23, 64}) {
    const int64_t share4 = (n + 3) / 4;
    for (int64_t p = 0; p <= share4; ++p) {
      std::vector<int64_t> seen;
      auto four = ranks_of(n, 4, {});
      seen_by(four, p, seen);
      auto three = ranks_of(n, 3, {{4, p}});
      seen_by(three, three[0].num_samples(), seen);
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(static_cast<std::size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(seen, all) << "n " << n << ", resumed after " << p << " per rank";
      // Every rank of the resumed run has the same count (pad mode).
      for (const auto& s : three) EXPECT_EQ(s.indices().size(), static_cast<std::size_t>(s.num_samples()));
    }
    // Chained: 4 ranks take 2 each, 3 ranks 1 each, then 2 ranks finish.
    std::vector<int64_t> seen;
    auto four = ranks_of(n, 4, {});
    seen_by(four, 2, seen);
    auto three = ranks_of(n, 3, {{4, 2}});
    seen_by(three, 1, seen);
    auto two = ranks_of(n, 2, {{4, 2}, {3, 1}});
    seen_by(two, two[0].num_samples(), seen);
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all) << "n " << n << ", 4 -> 3 -> 2";
  }
}

TEST(DistributedSampler, ResumingAtTheSameWorldSizeGivesTheRestOfEachRanksList) {
  // At the same world size the resumed pass is the rest of PyTorch's list
  // (its padding repeats the stretch's own head, so only unpadded entries
  // are compared).
  auto whole = shuffled(23, 4, 1);
  auto resumed = shuffled(23, 4, 1);
  resumed.resume_epoch({{4, 2}});
  const auto full = whole.indices();
  const auto rest = resumed.indices();
  const auto pad = resumed.is_padding();
  ASSERT_EQ(rest.size(), full.size() - 2);
  for (std::size_t j = 0; j < rest.size(); ++j) {
    if (!pad[j]) EXPECT_EQ(rest[j], full[j + 2]) << j;
  }
}

TEST(DistributedSampler, ResumeWithDropLastNeverRepeatsASample) {
  // drop_last: each stretch drops its own tail, so some samples go unseen,
  // but none is seen twice.
  std::vector<int64_t> seen;
  auto four = ranks_of(23, 4, {}, true);  // 5 each, 3 dropped
  seen_by(four, 2, seen);
  auto three = ranks_of(23, 3, {{4, 2}}, true);  // 12 left: 4 each
  EXPECT_EQ(three[0].num_samples(), 4);
  seen_by(three, 4, seen);
  std::set<int64_t> unique(seen.begin(), seen.end());
  EXPECT_EQ(unique.size(), seen.size());
  EXPECT_EQ(seen.size(), 8u + 12u);
}

TEST(DistributedSampler, ResumeEpochNamesABadStretchAndANewEpochEndsIt) {
  auto s = shuffled(10, 2, 0);
  try {
    s.resume_epoch({{4, 2}, {3, 3}});  // 4 x 2 leaves 2: 1 each at 3 ranks
    ADD_FAILURE() << "a stretch consuming more than its share was accepted";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("stretch 1 consumed 3 indices per rank, but 3 ranks share "
                                         "2 indices there (1 per rank)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(s.num_samples(), 5);  // nothing of the refused list was kept
  EXPECT_THROW(s.resume_epoch({{0, 1}}), rankwise::ConfigError);
  s.resume_epoch({{4, 2}});
  EXPECT_EQ(s.total_size(), 2);
  s.set_epoch(3);  // the same epoch: still resumed
  EXPECT_EQ(s.total_size(), 2);
  s.set_epoch(4);  // another epoch starts whole
  EXPECT_EQ(s.total_size(), 10);
}
