// Checked collectives (InitOptions::check_collectives): the record each rank
// exchanges and the error when ranks are out of step. The multi-process case
// (a collective inside `if (is_global_zero())`) is mp.test_fabric.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "detail/collective_check.h"

using rankwise::detail::CollectiveCall;
using rankwise::detail::describe_call;
using rankwise::detail::encode_call;
using rankwise::detail::mismatch_message;

TEST(CollectiveCheck, RecordsDescribeTheCall) {
  EXPECT_EQ(describe_call(encode_call({"all_reduce", torch::zeros({4, 2}), -1}, 0)),
            "all_reduce(Float [4, 2])");
  EXPECT_EQ(describe_call(encode_call({"broadcast", torch::zeros({3}, torch::kInt64), 1}, 5)),
            "broadcast(Long [3], root 1)");
  EXPECT_EQ(describe_call(encode_call({"barrier", torch::Tensor(), -1}, 2)), "barrier()");
  EXPECT_EQ(describe_call(encode_call({"all_gather", torch::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2}), -1}, 0)),
            "all_gather(Float [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, ... (2 elements)])");
}

TEST(CollectiveCheck, SameCallsOnEveryRankPass) {
  const auto record = encode_call({"all_reduce", torch::zeros({3}), -1}, 7);
  EXPECT_EQ(mismatch_message("rank 0/3", {record, record.clone(), record.clone()}), "");
}

TEST(CollectiveCheck, DifferentCallsNameEachRanksCall) {
  const auto reduce = encode_call({"all_reduce", torch::zeros({1}), -1}, 4);
  const auto gather = encode_call({"all_gather", torch::zeros({3}, torch::kInt64), -1}, 4);
  const auto message = mismatch_message("rank 2/4", {reduce, gather, gather, reduce});
  EXPECT_NE(message.find("rankwise: rank 2/4: the ranks called different collectives (checked "
                         "collective #5 of this process group): ranks 0, 3 called "
                         "all_reduce(Float [1]); ranks 1, 2 called all_gather(Long [3])"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("if (is_global_zero())"), std::string::npos) << message;
}

TEST(CollectiveCheck, ShapeDtypeAndRootMustAgree) {
  const auto base = encode_call({"broadcast", torch::zeros({2}), 0}, 0);
  EXPECT_NE(mismatch_message("rank 0/2", {base, encode_call({"broadcast", torch::zeros({3}), 0}, 0)}), "");
  EXPECT_NE(mismatch_message("rank 0/2", {base, encode_call({"broadcast", torch::zeros({2}, torch::kFloat64), 0}, 0)}), "");
  EXPECT_NE(mismatch_message("rank 0/2", {base, encode_call({"broadcast", torch::zeros({2}), 1}, 0)}), "");
}
