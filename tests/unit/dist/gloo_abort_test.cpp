// What rankwise says before Gloo's fatal check aborts a rank
// (src/dist/gloo_abort.h): the text comes from Gloo's
// transport/tcp/pair.cc ("GLOO_ENFORCE_LE(op.preamble.length, op.nbytes)").
#include <gtest/gtest.h>

#include "dist/gloo_abort.h"

#include <string>
#include <vector>

#include "rankwise/diag/flight_recorder.h"

namespace {

using rankwise::dist::explain_gloo_abort;
using rankwise::diag::CollectiveRecord;

CollectiveRecord record(uint64_t sequence, const char* operation, std::vector<int64_t> sizes,
                        std::string name, bool checked) {
  CollectiveRecord r;
  r.sequence = sequence;
  r.operation = operation;
  r.dtype = "Float";
  r.sizes = std::move(sizes);
  r.name = std::move(name);
  r.checked = checked;
  return r;
}

TEST(GlooAbort, ASizeCheckSaysTheRanksSentDifferentSizes) {
  const std::string what =
      "[enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:510] "
      "op.preamble.length <= op.nbytes. 1024 vs 12";
  CollectiveRecord call = record(4, "all_reduce", {3}, "", /*checked=*/false);
  call.reduce_op = "sum";
  call.file = "/src/train.cpp";
  call.line = 24;
  EXPECT_EQ(
      explain_gloo_abort(what, &call, {1, 2}),
      "rankwise: rank 1/2: Gloo aborted this process in all_reduce #4 (Float [3], sum) at "
      "train.cpp:24: the ranks sent different sizes to the same collective (a peer sent 1024 "
      "bytes where this rank expected at most 12). Give every rank a tensor of the same shape "
      "and dtype there; RANKWISE_DEBUG=detail (or InitOptions::check_collectives) names "
      "each rank's shape before Gloo sees them. Gloo's text: " +
          what);
}

// rankwise's own collectives (FSDP's gathers, DDP's buckets) are not checked
// ahead: the advice is about the model's steps, not a debug mode that is
// already on under a Fabric. No name is matched: the record says it.
TEST(GlooAbort, ASizeCheckInAnUncheckedRankwiseCollectiveSaysTheRanksRanDifferentSteps) {
  const CollectiveRecord gather = record(14, "all_gather", {67}, "FullyShardedDataParallel: the root unit", false);
  const std::string why = explain_gloo_abort(
      "[enforce fail at pair.cc:510] op.preamble.length <= op.nbytes. 268 vs 200", &gather, {1, 2});
  EXPECT_NE(why.find("(a peer sent 268 bytes where this rank expected at most 200). "
                     "'FullyShardedDataParallel: the root unit' is one of rankwise's own "
                     "collectives, which are not checked ahead: the ranks ran different steps of "
                     "the model here"),
            std::string::npos)
      << why;
  EXPECT_EQ(why.find("RANKWISE_DEBUG"), std::string::npos) << why;
}

// A checked collective agreed before it ran: the advice is not to turn checks on.
TEST(GlooAbort, ASizeCheckInACheckedCollectiveSaysTheCallsAgreed) {
  const CollectiveRecord barrier = record(9, "all_reduce", {2}, "", /*checked=*/true);
  const std::string why = explain_gloo_abort(
      "[enforce fail at pair.cc:510] op.preamble.length <= op.nbytes. 16 vs 8", &barrier, {0, 2});
  EXPECT_NE(why.find("Every rank's call was compared before it ran and agreed"), std::string::npos) << why;
  EXPECT_EQ(why.find("RANKWISE_DEBUG"), std::string::npos) << why;
}

TEST(GlooAbort, AnotherFatalCheckIsNamedWithItsCollective) {
  EXPECT_EQ(explain_gloo_abort("[enforce fail at pair.cc:1] x == y. 1 vs 2", nullptr, {0, 3}),
            "rankwise: rank 0/3: a fatal check of Gloo's (or c10's) failed: [enforce fail at "
            "pair.cc:1] x == y. 1 vs 2");
}

TEST(GlooAbort, OtherExceptionsAreLeftAlone) {
  const CollectiveRecord barrier = record(1, "barrier", {}, "", false);
  EXPECT_EQ(explain_gloo_abort("std::bad_alloc", &barrier, {0, 2}), "");
}

}  // namespace
