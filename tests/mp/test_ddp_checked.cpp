// DistributedDataParallel with checked collectives (debug mode, as under
// rankwise::Fabric or RANKWISE_DEBUG=detail) and its steps in the flight
// recorder: every rank records the same per-step count of ranks with inputs,
// whether it trains or waits in join(), so sequence numbers stay equal and
// the checks after a join pass; the record names the DDP step. The same holds
// for the gradients' all_reduce (recorded_group.h), which the rank in join()
// shadows with zeros.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>
#include <string>
#include <vector>

#include "ddp_test_support.h"
#include "rankwise/parallel/ddp.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace {

using ddp_test::flat_parameters;

int rank = 0;

class DdpChecked : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(20)).check_collectives(true));
    rank = rankwise::dist::rank();
  }
};

torch::nn::Sequential make_net() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(5, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
}

// `batches` training steps of this rank (its own data); then join().
template <typename Ddp>
void train_then_join(Ddp& ddp, int batches) {
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  ddp_test::train(ddp, opt, rank, batches);
  ddp.join();
}

// This rank's last recorded collective with `name` in it, or "".
std::string last_named(const std::string& part) {
  std::string found;
  for (const auto& r : rankwise::dist::process_group().flight_recorder().entries()) {
    if (r.name.find(part) != std::string::npos) found = rankwise::diag::describe(r);
  }
  return found;
}

// How many of this rank's recorded collectives after sequence number
// `after` have `part` in their name.
int count_named(const std::string& part, uint64_t after = 0) {
  int n = 0;
  for (const auto& r : rankwise::dist::process_group().flight_recorder().entries()) {
    n += r.sequence > after && r.name.find(part) != std::string::npos;
  }
  return n;
}

uint64_t last_sequence() { return rankwise::dist::process_group().flight_recorder().last_entered().sequence; }

TEST_F(DdpChecked, JoinShadowsTheOthersStepsUnderCheckedCollectives) {
  // Before: the rank in join() checked its shadow all_reduces (an all_gather
  // first) while the training rank's Reducer did not: it timed out after 20 s.
  const uint64_t before = last_sequence();
  auto net = make_net();
  rankwise::parallel::DistributedDataParallel ddp(
      net, rankwise::parallel::DistributedDataParallelOptions().uneven_inputs(rankwise::parallel::UnevenInputs::kJoin));
  train_then_join(ddp, rank == 0 ? 6 : 4);  // rank 1 shadows steps 5 and 6
  auto all = rankwise::dist::all_gather(flat_parameters(*ddp.module()));  // checked: same sequence
  EXPECT_TRUE(all[0].equal(all[1]));
  // Rank 1 counted in join() three times (steps 5 and 6, then the end when
  // rank 0 joined too), rank 0 in its steps 5 and 6 and its own join().
  EXPECT_EQ(count_named(rank == 0 ? "DistributedDataParallel join after step 6: ranks with inputs"
                                  : "DistributedDataParallel join after step 4: ranks with inputs", before),
            rank == 0 ? 1 : 3);
  if (rank == 0) EXPECT_EQ(count_named("DistributedDataParallel step 6: ranks with inputs", before), 1);
  // The gradients' all_reduce (one bucket for this small net): rank 0's
  // Reducer in each of its steps, rank 1's zeros while it shadows steps 5, 6.
  EXPECT_EQ(ddp.bucket_parameter_names().size(), 1u);
  if (rank == 0) {
    EXPECT_EQ(count_named("DistributedDataParallel step 6: gradients", before), 1);
    EXPECT_EQ(count_named(": gradients", before), 6);
    EXPECT_EQ(count_named("zero gradients", before), 0);
  } else {
    EXPECT_EQ(count_named("DistributedDataParallel join after step 4: zero gradients", before), 2);
    EXPECT_EQ(count_named("step 4: gradients", before), 1);
  }
  auto sequences = rankwise::dist::all_gather(torch::tensor(
      {static_cast<int64_t>(rankwise::dist::process_group().flight_recorder().last_entered().sequence)}));
  EXPECT_EQ(sequences[0].item<int64_t>(), sequences[1].item<int64_t>());
}

TEST_F(DdpChecked, UnevenInputsNameTheRankAndTheFlightRecorderTheStep) {
  auto net = make_net();
  rankwise::parallel::DistributedDataParallel ddp(net);
  try {
    train_then_join(ddp, rank == 0 ? 10 : 9);
    FAIL() << "expected an uneven-inputs error";
  } catch (const rankwise::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) [1] ran out of batches"), std::string::npos)
        << e.what();
  }
  // Rank 0 was in step 10's count, rank 1 in its join after step 9.
  const std::string last = last_named("DistributedDataParallel");
  EXPECT_NE(last.find(rank == 0 ? "all_reduce 'DistributedDataParallel step 10: ranks with inputs'"
                                : "all_reduce 'DistributedDataParallel join after step 9: ranks "
                                  "with inputs'"),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("(Long [1], sum)"), std::string::npos) << last;
  rankwise::dist::barrier();  // checked: every rank is at the same sequence
}

TEST_F(DdpChecked, GradientBucketsAreInTheFlightRecorder) {
  // Before: the Reducer's bucket all_reduces were not recorded, so a rank
  // waiting in DDP's backward looked to the hang report as if it were in no
  // collective. Two buckets: each Linear's parameters (8*5+8, 3*8+3 floats)
  // above a cap of 100 bytes.
  const uint64_t before = last_sequence();  // earlier tests' steps are in the record too
  auto net = make_net();
  rankwise::parallel::DistributedDataParallel ddp(
      net, rankwise::parallel::DistributedDataParallelOptions().bucket_cap_mb(100.0 / (1024 * 1024)));
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
  ddp_test::train(ddp, opt, rank, 3);
  const auto buckets = ddp.bucket_parameter_names().size();
  EXPECT_GE(buckets, 2u);
  EXPECT_EQ(count_named("DistributedDataParallel step 3: gradients", before),
            static_cast<int>(buckets));
  EXPECT_EQ(count_named(": gradients", before), 3 * static_cast<int>(buckets));
  // Completion is recorded by a callback of the work's future, which may run
  // just after the Reducer's wait returned.
  auto last = rankwise::dist::process_group().flight_recorder().last_entered();
  for (int i = 0; i < 100 && last.state == rankwise::diag::CollectiveRecord::State::kEntered; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    last = rankwise::dist::process_group().flight_recorder().last_entered();
  }
  EXPECT_EQ(last.name, "DistributedDataParallel step 3: gradients");
  EXPECT_EQ(last.operation, "all_reduce");
  EXPECT_EQ(last.dtype, "Float");
  EXPECT_EQ(last.state, rankwise::diag::CollectiveRecord::State::kCompleted);
  auto sequences = rankwise::dist::all_gather(torch::tensor({static_cast<int64_t>(last.sequence)}));
  EXPECT_EQ(sequences[0].item<int64_t>(), sequences[1].item<int64_t>());
}

}  // namespace
