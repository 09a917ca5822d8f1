// The root cause of a failed attempt (launch/workers/root_cause.h): primary
// errors before secondary ones, then the earliest.
#include <gtest/gtest.h>

#include <gloo/common/error.h>

#include <c10/util/Exception.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/attempt.h"
#include "wire/error_file.h"
#include "launch/workers/root_cause.h"
#include "launch/workers/summary.h"
#include "rankwise/error.h"
#include "rankwise/run_main.h"

namespace rankwise::launch {
using namespace rankwise::launch::rendezvous;
using namespace rankwise::launch::workers;
using namespace rankwise::wire;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using test::error;
using test::worker;

TEST(LaunchRootCause, PrimaryBeforeSecondaryThenEarliest) {
  const auto t0 = Clock::now();
  // Rank 0 failed first, on a closed connection; rank 1 had raised before and
  // was stopped while it was slow to exit.
  std::vector<launch::workers::WorkerRecord> w = {worker(0, launch::workers::WorkerState::kFailed, t0, 100),
                                 worker(1, launch::workers::WorkerState::kTerminated, t0, 300)};
  w[0].error = error("peer gone", true, t0 + milliseconds(90));
  w[1].error = error("boom", false, t0 + milliseconds(50));
  w[1].stop_time = t0 + milliseconds(110);
  EXPECT_EQ(launch::workers::pick_root_cause(w), 1u);
  // Secondary loses even when the primary came later (written while unwinding).
  w[1].error->time = t0 + milliseconds(105);
  EXPECT_EQ(launch::workers::pick_root_cause(w), 1u);
  // An error written after the launcher asked it to stop is a consequence.
  w[1].error->time = t0 + milliseconds(120);
  EXPECT_EQ(launch::workers::pick_root_cause(w), 0u);
  // Stopped without an error file: not a candidate.
  w[1].error.reset();
  EXPECT_EQ(launch::workers::pick_root_cause(w), 0u);
}

// A checkpoint error that rank 0 decided is raised on every rank; rank 1's
// copy written first does not make rank 1 the root cause.
TEST(LaunchRootCause, AnErrorRankZeroDecidedIsRankZeros) {
  const auto t0 = Clock::now();
  std::vector<launch::workers::WorkerRecord> w = {worker(0, launch::workers::WorkerState::kFailed, t0, 100),
                                                  worker(1, launch::workers::WorkerState::kFailed, t0, 90)};
  w[0].error = error("rankwise: no usable checkpoint in 'c'", false, t0 + milliseconds(80));
  w[1].error = error("rankwise: no usable checkpoint in 'c' (raised on rank 0, which decides)", false,
                     t0 + milliseconds(70));
  EXPECT_EQ(launch::workers::pick_root_cause(w), 0u);
  EXPECT_EQ(wire::echoed_rank("x (raised on rank 3, which reads first)"), 3);
  EXPECT_EQ(wire::echoed_rank("x (rank 0's error, raised on rank 2)"), 0);
  EXPECT_EQ(wire::echoed_rank("x (raised on rank 1 for save)"), std::nullopt);
  // Rank 0 has no error of its own (e.g. it was stopped first): rank 1 stays.
  w[0].error.reset();
  w[0].state = launch::workers::WorkerState::kTerminated;
  EXPECT_EQ(launch::workers::pick_root_cause(w), 1u);
}

TEST(LaunchRootCause, WorkersWithoutErrorFileRankByExitTime) {
  const auto t0 = Clock::now();
  std::vector<launch::workers::WorkerRecord> w = {worker(0, launch::workers::WorkerState::kFailed, t0, 100),
                                 worker(1, launch::workers::WorkerState::kFailed, t0, 200),
                                 worker(2, launch::workers::WorkerState::kFailed, t0, 300)};
  w[1].term_signal = 9;  // killed: no error file
  w[0].error = error("peer gone", true, t0 + milliseconds(90));
  w[2].error = error("boom", false, t0 + milliseconds(250));
  EXPECT_EQ(launch::workers::pick_root_cause(w), 1u);  // exited at 200 ms, before the error at 250 ms
  w[2].error->time = t0 + milliseconds(150);
  EXPECT_EQ(launch::workers::pick_root_cause(w), 2u);
  w[2].error->time = t0 + milliseconds(200);
  EXPECT_EQ(launch::workers::pick_root_cause(w), 1u);  // a tie: the lower index
  // Only secondary errors: the earliest.
  w[1].error = error("peer gone", true, t0 + milliseconds(80));
  w[2].error = error("peer gone", true, t0 + milliseconds(70));
  EXPECT_EQ(launch::workers::pick_root_cause(w), 2u);
  // None failed.
  std::vector<launch::workers::WorkerRecord> ok = {worker(0, launch::workers::WorkerState::kSucceeded, t0, 100),
                                  worker(1, launch::workers::WorkerState::kTerminated, t0, 100)};
  EXPECT_FALSE(launch::workers::pick_root_cause(ok).has_value());
}

TEST(LaunchRootCause, ARankThatLeftEarlyCausedThePeersSecondaryErrors) {
  const auto t0 = Clock::now();
  // Rank 0 returned 0 on its own; ranks 1 and 2 then failed: a peer exited.
  std::vector<WorkerRecord> w = {worker(0, WorkerState::kSucceeded, t0, 300),
                                 worker(1, WorkerState::kFailed, t0, 200),
                                 worker(2, WorkerState::kFailed, t0, 250)};
  w[1].error = error("peer gone", true, t0 + milliseconds(150));
  w[2].error = error("peer gone", true, t0 + milliseconds(160));
  const std::vector<std::optional<CollectiveProgress>> none;
  const auto first = pick_root_cause(w);
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(pick_early_exit(w, first, none), 0u);  // reaped after them, still the cause
  // A primary error is its own root cause: rank 0 may just have finished.
  w[1].error = error("boom", false, t0 + milliseconds(150));
  EXPECT_FALSE(pick_early_exit(w, pick_root_cause(w), none).has_value());
  // Asked to stop after the failure (it was slow to exit): still the cause.
  w[1].error = error("peer gone", true, t0 + milliseconds(150));
  w[0].stop_requested = true;
  w[0].stop_time = t0 + milliseconds(180);
  EXPECT_EQ(pick_early_exit(w, pick_root_cause(w), none), 0u);
  // Exit code 0 after the launcher asked it to stop first is no early exit.
  w[0].stop_time = t0 + milliseconds(140);
  EXPECT_FALSE(pick_early_exit(w, pick_root_cause(w), none).has_value());
  EXPECT_FALSE(pick_early_exit(w, std::nullopt, none).has_value());
}

TEST(LaunchRootCause, ARankWhoseRecordSaysItLeftBeforeItWasStoppedIsTheCause) {
  // Rank 0 destroyed its process group, then was slow to exit: the launcher
  // stopped it (SIGTERM) after ranks 1, 2 failed on the closed connection.
  const auto now = Clock::now();
  std::vector<WorkerRecord> w = {worker(0, WorkerState::kTerminated, now, 0),
                                 worker(1, WorkerState::kFailed, now, 0),
                                 worker(2, WorkerState::kTerminated, now, 0)};
  w[0].stop_requested = w[2].stop_requested = true;
  w[0].stop_time = w[2].stop_time = now;
  w[1].error = error("peer gone", true, now - milliseconds(500));
  w[2].error = error("peer gone", true, now - milliseconds(400));
  CollectiveProgress left;
  left.exited = true;
  left.heartbeat_ms = unix_ms_now() - 1000;  // 1 s before the stop
  std::vector<std::optional<CollectiveProgress>> records{left, std::nullopt, std::nullopt};
  EXPECT_EQ(pick_early_exit(w, pick_root_cause(w), records), 0u);
  // It left only when the launcher stopped it (a SIGTERM handler): no cause.
  records[0]->heartbeat_ms = unix_ms_now() + 100;
  EXPECT_FALSE(pick_early_exit(w, pick_root_cause(w), records).has_value());
}

TEST(LaunchRootCause, AnEarlyExitSaysItsStepAndWhereThePeersWere) {
  CollectiveProgress own;
  own.entered = own.completed = 20;
  own.last = "all_reduce #20 (Long [1], sum) at join.cpp:43";
  own.ended_ms = 5;
  own.exited = true;
  own.step = 8;
  CollectiveProgress peer = own;
  peer.entered = 21;
  peer.completed = 20;
  peer.failed = true;
  peer.exited = false;
  peer.last = "all_reduce 'DistributedDataParallel step 9: ranks with inputs' #21 (Long [1], sum) at join.cpp:43";
  EXPECT_EQ(describe_early_exit(0, {own, peer, peer}),
            "ended with exit code 0 (returned from main or called exit) at step 8, while ranks 1, "
            "2 were in all_reduce 'DistributedDataParallel step 9: ranks with inputs' #21 (Long "
            "[1], sum) at join.cpp:43: it left while they still needed it");
  CollectiveProgress working = own;  // completed its last collective
  working.exited = false;
  EXPECT_EQ(describe_early_exit(1, {working, std::nullopt}),
            "ended with exit code 0 (returned from main or called exit), while rank 0 was past "
            "all_reduce #20 (Long [1], sum) at join.cpp:43: it left while they still needed it");
}

}  // namespace
}  // namespace rankwise::launch
