// What rankwise says before Gloo's fatal check aborts a rank
// (src/dist/gloo_abort.h): the text comes from Gloo's
// transport/tcp/pair.cc ("GLOO_ENFORCE_LE(op.preamble.length, op.nbytes)").
#include <gtest/gtest.h>

#include "dist/gloo_abort.h"

namespace {

using rankwise::dist::explain_gloo_abort;

TEST(GlooAbort, ASizeCheckSaysTheRanksSentDifferentSizes) {
  const std::string what =
      "[enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:510] "
      "op.preamble.length <= op.nbytes. 1024 vs 12";
  EXPECT_EQ(
      explain_gloo_abort(what, "all_reduce #4 (Float [3], sum) at train.cpp:24", {1, 2}),
      "rankwise: rank 1/2: Gloo aborted this process in all_reduce #4 (Float [3], sum) at "
      "train.cpp:24: the ranks sent different sizes to the same collective (a peer sent 1024 "
      "bytes where this rank expected at most 12). Give every rank a tensor of the same shape "
      "and dtype there; RANKWISE_DEBUG=detail (or InitOptions::check_collectives) names "
      "each rank's shape before Gloo sees them. Gloo's text: " +
          what);
}

// FullyShardedDataParallel's gathers are not checked ahead: the advice is
// about its units, not a debug mode that is already on under a Fabric.
TEST(GlooAbort, ASizeCheckInAnFsdpGatherSaysTheRanksRanDifferentUnits) {
  const std::string why = explain_gloo_abort(
      "[enforce fail at pair.cc:510] op.preamble.length <= op.nbytes. 268 vs 200",
      "all_gather 'FullyShardedDataParallel: the root unit' #14 (Float [67])", {1, 2});
  EXPECT_NE(why.find("(a peer sent 268 bytes where this rank expected at most 200). The ranks ran "
                     "different FullyShardedDataParallel units here (a unit skipped, or units run "
                     "in another order, on some rank"),
            std::string::npos)
      << why;
  EXPECT_EQ(why.find("RANKWISE_DEBUG"), std::string::npos) << why;
}

TEST(GlooAbort, AnotherFatalCheckIsNamedWithItsCollective) {
  EXPECT_EQ(explain_gloo_abort("[enforce fail at pair.cc:1] x == y. 1 vs 2", "", {0, 3}),
            "rankwise: rank 0/3: a fatal check of Gloo's (or c10's) failed: [enforce fail at "
            "pair.cc:1] x == y. 1 vs 2");
}

TEST(GlooAbort, OtherExceptionsAreLeftAlone) {
  EXPECT_EQ(explain_gloo_abort("std::bad_alloc", "barrier #1 at a.cpp:1", {0, 2}), "");
}

}  // namespace
