// Collectives that never hang silently: each mistake of
// tests/programs/torch_hang_cases.cpp, run through rankwise-run, ends within
// the 3 s collective timeout plus a margin (not after the 30 s the other
// ranks sleep) with an error naming the ranks that held the others up, the
// collective and its call site.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "support/launcher.h"

namespace {

using namespace rankwise::test;
const std::string kCases = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_hang_cases";

// Startup (rendezvous, libtorch) and teardown (SIGTERM, 1 s grace) on a slow
// 2-core machine; the sleeping ranks would take 30 s.
constexpr double kMargin = 9.0;

Result run_case(int nproc, const std::string& mode, const std::string& variant = "",
                const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> args{"--nproc-per-node", std::to_string(nproc), "--grace-period", "1",
                                kCases, mode};
  if (!variant.empty()) args.push_back(variant);
  return run(args, env);
}

// "torch_hang_cases.cpp:LINE" for the line rank 0 printed as "site LINE".
std::string call_site(const Result& r) {
  std::smatch m;
  const std::regex site("site (\\d+)");
  if (!std::regex_search(r.out, m, site)) return "torch_hang_cases.cpp:?";
  return "torch_hang_cases.cpp:" + m[1].str();
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(HangReports, BarrierOnRankZeroOnlyNamesTheRanksThatNeverCame) {
  const Result r = run_case(4, "rank0-barrier");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_GE(r.seconds, 3.0);
  EXPECT_LT(r.seconds, 3.0 + kMargin) << r.err;
  const std::string site = call_site(r);
  EXPECT_TRUE(has(r.err, "rank 0/4: barrier #2 at " + site + " failed after a timeout of 3000 ms"))
      << r.err;
  EXPECT_TRUE(has(r.err, "ranks 1, 2, 3 never entered it (#2): ranks 1, 2, 3: last in "
                         "all_reduce #1 (Float [2], sum) at torch_hang_cases.cpp:"))
      << r.err;
  EXPECT_TRUE(has(r.err, "root cause")) << r.err;
}

TEST(HangReports, BarrierOnRankZeroOnlyAfterTheOthersReturned) {
  const Result r = run_case(4, "rank0-barrier", "return");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 3.0 + kMargin) << r.err;
  EXPECT_TRUE(has(r.err, "rank 0/4: barrier #2 at " + call_site(r))) << r.err;
  EXPECT_TRUE(has(r.err, "ranks 1, 2, 3 never entered it (#2): ranks 1, 2, 3: exited "
                         "(process group destroyed); last in all_reduce #1"))
      << r.err;
}

TEST(HangReports, StoppedRankIsNamedAndTheJobEnds) {
  const Result r = run_case(2, "sigstop");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_GE(r.seconds, 3.0);
  EXPECT_LT(r.seconds, 3.0 + kMargin) << r.err;
  EXPECT_TRUE(has(r.err, "rank 0/2: all_reduce #6 (Float [2], sum) at " + call_site(r) +
                         " failed after a timeout of 3000 ms"))
      << r.err;
  EXPECT_TRUE(has(r.err, "rank 1 never entered it (#6): rank 1: last in all_reduce #5")) << r.err;
  EXPECT_TRUE(has(r.err, "heartbeat stopped")) << r.err;
  // The launcher's summary: rank 1 was stopped, and it was ended.
  EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 1 \\(pid \\d+\\): terminated \\(SIG[A-Z]+\\); "
                                                  "it was stopped \\(SIGSTOP or a debugger\\)")))
      << r.err;
}

TEST(HangReports, DebugModeNamesBothShapesAndCallSites) {
  const Result r = run_case(2, "shape", "", {{"RANKWISE_DEBUG", "detail"}});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, kMargin) << r.err;
  const std::string site = call_site(r);
  EXPECT_TRUE(has(r.err, "the ranks called different collectives: rank 0 called all_reduce #2 "
                         "(Float [2], sum) at " + site + "; rank 1 called all_reduce #2 (Float "
                         "[3], sum) at " + site))
      << r.err;
}

TEST(HangReports, DebugModeNamesBothOperations) {
  const Result r = run_case(2, "op", "", {{"RANKWISE_DEBUG", "detail"}});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, kMargin) << r.err;
  EXPECT_TRUE(has(r.err, "rank 0 called all_reduce #2 (Float [2], sum) at " + call_site(r) +
                         "; rank 1 called broadcast #2 (Float [2], root 0) at "
                         "torch_hang_cases.cpp:"))
      << r.err;
}

TEST(HangReports, MismatchesWithoutDebugModeStillEnd) {
  for (const std::string mode : {"shape", "op"}) {
    const Result r = run_case(2, mode);
    EXPECT_EQ(r.code, 1) << mode << "\n" << r.err;
    EXPECT_LT(r.seconds, 3.0 + kMargin) << mode << "\n" << r.err;
    EXPECT_FALSE(has(r.err, "SIGSEGV")) << r.err;
    EXPECT_FALSE(has(r.err, "SIGABRT")) << r.err;
  }
}

TEST(HangReports, EarlyStoppingOnOneRankNamesTheRankThatLeft) {
  const Result r = run_case(2, "early-stop");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 3.0 + kMargin) << r.err;
  EXPECT_TRUE(has(r.err, "rank 1/2: all_reduce #4 (Float [1], sum) at " + call_site(r))) << r.err;
  EXPECT_TRUE(has(r.err, "rank 0 never entered it (#4): rank 0: exited (process group "
                         "destroyed); last in all_reduce #3"))
      << r.err;
}

TEST(HangReports, MonitoredBarrierNamesEveryMissingRankOnEveryWaitingRank) {
  for (const std::string variant : {"", "all"}) {
    const Result r = run_case(4, "monitored", variant);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_GE(r.seconds, 2.0);
    EXPECT_LT(r.seconds, 2.0 + kMargin) << r.err;
    const std::string text = "ranks 1, 2 did not reach monitored_barrier 'eval-done' (#1 at " +
                             call_site(r) + ") within 2 s (rank 1: in no collective yet; rank 2: "
                             "in no collective yet)";
    EXPECT_TRUE(has(r.err, "rank 0/4: " + text) || has(r.err, "rank 3/4: " + text)) << r.err;
  }
}

TEST(HangReports, MonitoredBarrierFailsAtOnceWhenAMissingRankExited) {
  const Result r = run_case(2, "monitored-exit");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, kMargin) << r.err;  // not the barrier's 20 s
  EXPECT_TRUE(has(r.err, "rank 0/2: rank 1 exited (destroyed its process group) without reaching "
                         "monitored_barrier 'eval-done' (#2 at " + call_site(r) + ")"))
      << r.err;
}

// A unit's forward throws on rank 1 only, at the process group's default
// timeout (300 s): rank 0 waits in that step's next gather, and the job still
// ends in seconds with rank 1 as the root cause, naming the unit.
TEST(HangReports, AnFsdpUnitThatThrowsOnOneRankIsTheRootCauseNamingTheUnit) {
  const Result r = run_case(2, "fsdp-throws", "", {{"HANG_CASE_TIMEOUT_S", "300"}});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, kMargin) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("root cause \\(first failure\\): rank 1 \\(local rank 1\\)")))
      << r.err;
  EXPECT_TRUE(has(r.err, "torch_hang_cases: block 1 failed on this rank")) << r.err;
  EXPECT_TRUE(has(r.err, "rank 1/2: FullyShardedDataParallel: the forward threw in unit '1'")) << r.err;
  EXPECT_FALSE(has(r.err, "deadlock")) << r.err;
}

TEST(HangReports, FlightRecorderIsDumpedOnATimeout) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("rankwise-fr-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const Result r = run_case(2, "sigstop", "", {{"RANKWISE_FLIGHT_RECORDER_DIR", dir}});
  EXPECT_TRUE(has(r.err, "Flight recorder: " + dir + "/rank0.json")) << r.err;
  std::ifstream in(dir + "/rank0.json");
  ASSERT_TRUE(in) << r.err;
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("rank"), 0);
  EXPECT_EQ(doc.at("world_size"), 2);
  const auto& entries = doc.at("entries");
  ASSERT_EQ(entries.size(), 6u);
  EXPECT_EQ(entries[4].at("state"), "completed");
  EXPECT_EQ(entries[5].at("sequence"), 6);
  EXPECT_EQ(entries[5].at("operation"), "all_reduce");
  EXPECT_EQ(entries[5].at("state"), "failed");
  EXPECT_EQ(entries[5].at("sizes"), nlohmann::json::array({2}));
  EXPECT_EQ(entries[5].at("reduce_op"), "sum");
  EXPECT_TRUE(has(entries[5].at("file").get<std::string>(), "torch_hang_cases.cpp"));
  EXPECT_EQ(entries[5].at("line").get<int>(), std::stoi(call_site(r).substr(21)));
  std::filesystem::remove_all(dir);
}

TEST(HangReports, WithALogDirTheFlightRecorderIsDumpedBesideTheLogs) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("rankwise-logs-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const Result r = run({"--nproc-per-node", "4", "--grace-period", "1", "--log-dir", dir, kCases,
                        "rank0-barrier"});
  const std::string dump = dir + "/attempt_0/flight_recorder/rank0.json";
  EXPECT_TRUE(has(r.err, "Flight recorder: " + dump)) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dump)) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
