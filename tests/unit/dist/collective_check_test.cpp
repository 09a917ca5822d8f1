// Checked collectives (InitOptions::check_collectives): the record each rank
// exchanges and the error when ranks are out of step. The multi-process case
// (a collective inside `if (is_global_zero())`) is mp.test_fabric.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/collective_check.h"

using rankwise::dist::CollectiveCall;
using rankwise::dist::describe_call;
using rankwise::dist::encode_call;
using rankwise::dist::mismatch_message;

TEST(CollectiveCheck, RecordsDescribeTheCall) {
  EXPECT_EQ(describe_call(encode_call({"all_reduce", torch::zeros({4, 2}), -1, "sum",
                                       "/src/train.cpp", 88}, 12)),
            "all_reduce #12 (Float [4, 2], sum) at train.cpp:88");
  EXPECT_EQ(describe_call(encode_call({"broadcast", torch::zeros({3}, torch::kInt64), 1}, 5)),
            "broadcast #5 (Long [3], root 1)");
  EXPECT_EQ(describe_call(encode_call({"barrier", torch::Tensor(), -1}, 2)), "barrier #2");
  EXPECT_EQ(describe_call(encode_call({"all_gather", torch::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2}), -1}, 0)),
            "all_gather #0 (Float [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, ... (2 elements)])");
  // A file name longer than the record holds is cut, never overflows it.
  const std::string long_name(300, 'x');
  EXPECT_EQ(describe_call(encode_call({"barrier", torch::Tensor(), -1, "", long_name, 7}, 1)),
            "barrier #1 at " + std::string(111, 'x') + ":7");
}

TEST(CollectiveCheck, SameCallsOnEveryRankPass) {
  const auto record = encode_call({"all_reduce", torch::zeros({3}), -1}, 7);
  EXPECT_EQ(mismatch_message("rank 0/3", {record, record.clone(), record.clone()}), "");
}

TEST(CollectiveCheck, DifferentCallsNameEachRanksCall) {
  const auto reduce = encode_call({"all_reduce", torch::zeros({1}), -1, "sum", "a/train.cpp", 88}, 4);
  const auto gather = encode_call({"all_gather", torch::zeros({3}, torch::kInt64), -1, "", "eval.cpp", 9}, 4);
  const auto message = mismatch_message("rank 2/4", {reduce, gather, gather, reduce});
  EXPECT_NE(message.find("rankwise: rank 2/4: the ranks called different collectives: ranks 0, 3 "
                         "called all_reduce #4 (Float [1], sum) at train.cpp:88; ranks 1, 2 "
                         "called all_gather #4 (Long [3]) at eval.cpp:9"),
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

TEST(CollectiveCheck, ReduceOpAndSequenceMustAgreeButNotTheCallSite) {
  const auto sum = encode_call({"all_reduce", torch::zeros({2}), -1, "sum", "a.cpp", 1}, 3);
  EXPECT_NE(mismatch_message("rank 0/2", {sum, encode_call({"all_reduce", torch::zeros({2}), -1, "max", "a.cpp", 1}, 3)}), "");
  EXPECT_NE(mismatch_message("rank 0/2", {sum, encode_call({"all_reduce", torch::zeros({2}), -1, "sum", "a.cpp", 1}, 4)}), "");
  // The same collective from two lines (an if/else that both call it) pairs correctly.
  EXPECT_EQ(mismatch_message("rank 0/2", {sum, encode_call({"all_reduce", torch::zeros({2}), -1, "sum", "b.cpp", 9}, 3)}), "");
}
