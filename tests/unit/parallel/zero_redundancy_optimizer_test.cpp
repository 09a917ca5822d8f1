// rankwise::parallel::zero_partition against PyTorch's ZeroRedundancyOptimizer
// partition (tests/python/zero_partition_reference.py runs PyTorch's own
// _partition_parameters): largest parameter first, to the rank with the
// fewest elements so far, totals carried across parameter groups.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <vector>

#include "rankwise/error.h"
#include "rankwise/parallel/zero_redundancy_optimizer.h"
#include "support/shell.h"

namespace {

using Groups = std::vector<std::vector<int64_t>>;

TEST(ZeroPartition, EqualsPyTorchsPartition) {
  if (!rankwise::test::have_python_torch()) {
    GTEST_SKIP() << "the reference Python (" RANKWISE_PYTHON ") cannot import torch";
  }
  std::vector<std::pair<Groups, int>> cases = {
      {{{3, 10, 1, 6, 4, 3}}, 2}, {{{3, 10, 1, 6, 4, 3}}, 3}, {{{3, 10, 1, 6, 4, 3}}, 1},
      {{{5}, {2, 4, 1}}, 2},      {{{7, 7}}, 4},              {{{1, 1, 1, 1, 1}}, 2},
  };
  // And random models: up to 4 groups of up to 12 parameters, 1-8 ranks.
  std::mt19937 gen(7);
  for (int c = 0; c < 20; ++c) {
    Groups groups(1 + gen() % 4);
    for (auto& g : groups) {
      g.resize(1 + gen() % 12);
      for (auto& n : g) n = 1 + static_cast<int64_t>(gen() % 5000);
    }
    cases.emplace_back(groups, static_cast<int>(1 + gen() % 8));
  }
  nlohmann::json request = nlohmann::json::array();
  for (const auto& [groups, world] : cases) {
    request.push_back({{"groups", groups}, {"world_size", world}});
  }
  const std::string command = rankwise::test::python() + RANKWISE_SOURCE_DIR
                              "/tests/python/zero_partition_reference.py '" +
                              request.dump() + "' 2>/dev/null";
  const auto reference = nlohmann::json::parse(rankwise::test::shell(command));
  ASSERT_EQ(reference.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(rankwise::parallel::zero_partition(cases[i].first, cases[i].second),
              reference[i].get<std::vector<int>>())
        << "case " << i << ": " << request[i].dump();
  }
}

TEST(ZeroPartition, BalancesAndNamesABadWorldSize) {
  // Hand-checked: sorted 10 6 4 3 3 1 -> totals [14, 13] on 2 ranks.
  EXPECT_EQ(rankwise::parallel::zero_partition({{3, 10, 1, 6, 4, 3}}, 2),
            (std::vector<int>{0, 0, 0, 1, 1, 1}));
  // More ranks than parameters: some own nothing.
  EXPECT_EQ(rankwise::parallel::zero_partition({{7, 7}}, 4), (std::vector<int>{0, 1}));
  try {
    rankwise::parallel::zero_partition({{1}}, 0);
    ADD_FAILURE() << "world size 0 was accepted";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("world size 0 must be at least 1"), std::string::npos);
  }
}

}  // namespace
