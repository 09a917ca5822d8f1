// rankwise-test-nproc: 3
// Collectives on the c10d Gloo group, run on 3 ranks through rankwise-run.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

class Collectives : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60))); }
  int rank = rankwise::dist::rank();
  int world = rankwise::dist::world_size();
};

TEST_F(Collectives, EnvironmentFromLauncher) {
  EXPECT_EQ(world, 3);
  EXPECT_EQ(rankwise::dist::process_group().env().local_world_size, 3);
  EXPECT_EQ(rankwise::dist::local_rank(), rank);
  EXPECT_TRUE(rankwise::dist::process_group().env().agent_store);
}

// The launcher gives workers SIGPIPE at its default; init() ignores it, so a
// write to a dead peer's socket (Gloo's writev) fails with an error instead of
// killing this rank silently.
TEST_F(Collectives, InitIgnoresSigpipeLeftAtItsDefault) {
  struct sigaction pipe {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &pipe), 0);
  EXPECT_EQ(pipe.sa_handler, SIG_IGN);
}

TEST_F(Collectives, AllReduceOps) {
  // rank r holds [r + 1, 10 * (r + 1)]: sums 6, 60; min 1, 10; max 3, 30.
  auto base = torch::tensor({rank + 1.0, 10.0 * (rank + 1)}, torch::kFloat64);
  auto sum = base.clone();
  rankwise::dist::all_reduce(sum, rankwise::dist::ReduceOp::kSum);
  EXPECT_TRUE(sum.equal(torch::tensor({6.0, 60.0}, torch::kFloat64)));
  auto avg = base.clone();
  rankwise::dist::all_reduce(avg, rankwise::dist::ReduceOp::kAvg);
  EXPECT_TRUE(avg.equal(torch::tensor({2.0, 20.0}, torch::kFloat64)));
  auto mn = base.clone();
  rankwise::dist::all_reduce(mn, rankwise::dist::ReduceOp::kMin);
  EXPECT_TRUE(mn.equal(torch::tensor({1.0, 10.0}, torch::kFloat64)));
  auto mx = base.clone();
  rankwise::dist::all_reduce(mx, rankwise::dist::ReduceOp::kMax);
  EXPECT_TRUE(mx.equal(torch::tensor({3.0, 30.0}, torch::kFloat64)));
  auto counts = torch::tensor({int64_t{1} << 40}, torch::kInt64);  // exact in 64-bit integers
  rankwise::dist::all_reduce(counts);
  EXPECT_EQ(counts.item<int64_t>(), 3 * (int64_t{1} << 40));
}

TEST_F(Collectives, AvgOfIntegersIsAConfigError) {
  auto t = torch::ones({2}, torch::kInt64);
  EXPECT_THROW(rankwise::dist::all_reduce(t, rankwise::dist::ReduceOp::kAvg), rankwise::ConfigError);
}

TEST_F(Collectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < world; ++root) {
    auto t = torch::full({4}, static_cast<float>(rank * 100 + 7));
    rankwise::dist::broadcast(t, root);
    EXPECT_TRUE(t.equal(torch::full({4}, static_cast<float>(root * 100 + 7))));
  }
}

TEST_F(Collectives, AllGather) {
  auto mine = torch::arange(2, torch::kInt64) + 10 * rank;
  auto gathered = rankwise::dist::all_gather(mine);
  ASSERT_EQ(static_cast<int>(gathered.size()), world);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(gathered[r].equal(torch::arange(2, torch::kInt64) + 10 * r)) << "from rank " << r;
  }
}

TEST_F(Collectives, BarrierWaitsForTheSlowestRank) {
  // An ordering, not a duration (clocks of different processes on a loaded
  // machine): the last rank counts itself in the store after a pause, just
  // before its barrier; every rank that leaves the barrier already sees it.
  // (TCPStore's add waits for the server's answer.)
  const auto& store = rankwise::dist::process_group().store();
  const std::string key = "test/barrier_slowest_entered";
  if (rank == world - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    store->add(key, 1);
  }
  rankwise::dist::barrier();
  EXPECT_EQ(store->add(key, 0), 1) << "rank " << rank << " left the barrier before rank "
                                   << world - 1 << " entered it";
}
