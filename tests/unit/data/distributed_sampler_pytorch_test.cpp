// The sampler's index lists equal PyTorch's DistributedSampler (Debian
// python3-torch 1.13), run here as the reference.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rankwise/data/distributed_sampler.h"
#include "support/shell.h"

using rankwise::test::shell;

TEST(DistributedSamplerInterop, SameIndicesAsPyTorch) {
  if (!rankwise::test::have_python_torch()) {
    GTEST_SKIP() << "the reference Python (" RANKWISE_PYTHON ") cannot import torch";
  }
  struct Case {
    int64_t n;
    int replicas;
    uint64_t seed;
    int64_t epoch;
    bool shuffle;
    bool drop_last;
  };
  const Case cases[] = {{10, 3, 0, 0, true, false},  {10, 3, 0, 0, false, false},
                        {101, 4, 42, 3, true, false}, {101, 4, 42, 3, true, true},
                        {7, 2, 5, 1, true, false},    {2, 5, 0, 0, true, false},
                        {1000, 2, 0, 7, true, false}};
  for (const auto& c : cases) {
    const std::string command = rankwise::test::python() + RANKWISE_SOURCE_DIR
                                "/tests/python/sampler_reference.py " +
                                std::to_string(c.n) + " " + std::to_string(c.replicas) + " " +
                                std::to_string(c.seed) + " " + std::to_string(c.epoch) + " " +
                                std::to_string(c.shuffle) + " " + std::to_string(c.drop_last);
    auto reference = nlohmann::json::parse(shell(command));
    for (int r = 0; r < c.replicas; ++r) {
      rankwise::data::DistributedSampler sampler(c.n, rankwise::data::DistributedSamplerOptions()
                                                    .num_replicas(c.replicas)
                                                    .rank(r)
                                                    .seed(c.seed)
                                                    .shuffle(c.shuffle)
                                                    .drop_last(c.drop_last));
      sampler.set_epoch(c.epoch);
      EXPECT_EQ(sampler.indices(), reference[std::to_string(r)].get<std::vector<int64_t>>())
          << command << " rank " << r;
    }
  }
}
