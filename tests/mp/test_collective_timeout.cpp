// A collective that one rank never reaches fails on the others with a
// TimeoutError once the group's timeout has passed (rankwise decides this
// from how long it waited, not from c10d's text), on 2 ranks.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

TEST(CollectiveTimeout, BarrierThatOneRankSkipsIsATimeoutError) {
  auto& group = rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(2)));
  const std::string done_key = "test/rank0_timed_out";
  if (group.rank() == 0) {
    const int line = __LINE__ + 2;
    try {
      group.barrier();
      FAIL() << "expected a TimeoutError";
    } catch (const rankwise::TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "rankwise: rank 0/2: barrier #1 at test_collective_timeout.cpp:" +
                    std::to_string(line) + " failed after a timeout of 2000 ms: not every rank "
                    "reached this collective: rank 1 never entered it (#1): rank 1: in no "
                    "collective yet"),
                std::string::npos)
          << e.what();
    }
    group.store()->set(done_key, std::vector<uint8_t>{'1'});
  } else {
    // Rank 1 skips the barrier and waits (longer than the group's timeout)
    // until rank 0 has seen its error.
    group.store()->wait({done_key}, std::chrono::seconds(60));
  }
}
