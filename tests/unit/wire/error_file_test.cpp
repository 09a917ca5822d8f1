// Error files (wire/error_file.h): what run_main writes when a rank fails,
// and how the launcher reads it, torchelastic's layout included.
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

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string wall_ns_ago(milliseconds ago) {
  const auto t = std::chrono::system_clock::now() - ago;
  return std::to_string(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

TEST(LaunchErrorFile, ParsesRunMainsRecordWithItsTime) {
  const auto written = Clock::now() - std::chrono::hours(1);
  const wire::WorkerError e = wire::parse_worker_error(
      R"({"message":"boom\nsecond line","rank":3,"secondary":true,"timestamp":1,"timestamp_ns":)" +
          wall_ns_ago(milliseconds(2000)) + "}\n",
      written);
  EXPECT_EQ(e.message, "boom\nsecond line");
  EXPECT_TRUE(e.secondary);
  EXPECT_EQ(e.rank, 3);
  // timestamp_ns wins over timestamp and the file's time; 2 s ago, give or take.
  EXPECT_NEAR(seconds(Clock::now() - e.time), 2.0, 0.5);
}

TEST(LaunchErrorFile, FallsBackToSecondsThenToTheFilesTime) {
  const auto written = Clock::now() - milliseconds(500);
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const wire::WorkerError s = wire::parse_worker_error(
      R"({"message":"a","timestamp":)" + std::to_string(now_s - 100) + "}", written);
  EXPECT_FALSE(s.secondary);
  EXPECT_FALSE(s.rank.has_value());
  EXPECT_NEAR(seconds(Clock::now() - s.time), 100.0, 1.5);  // whole seconds

  // torchelastic's layout: the message and a timestamp string inside "message".
  const wire::WorkerError t = wire::parse_worker_error(
      R"({"message":{"message":"RuntimeError: x","extraInfo":{"py_callstack":"...","timestamp":")" +
          std::to_string(now_s - 50) + R"("}}})",
      written);
  EXPECT_EQ(t.message, "RuntimeError: x");
  EXPECT_NEAR(seconds(Clock::now() - t.time), 50.0, 1.5);

  for (const std::string& text : {std::string("plain text\n"), std::string("{\"no\": \"message\"}"),
                                  std::string("{\"message\": 3}"), std::string("{broken")}) {
    const wire::WorkerError p = wire::parse_worker_error(text, written);
    EXPECT_EQ(p.message, text == "plain text\n" ? "plain text" : text) << text;
    EXPECT_FALSE(p.secondary) << text;
    EXPECT_EQ(p.time, written) << text;
  }
}

TEST(LaunchErrorFile, ReadsWhatRecordErrorWrites) {
  char templ[] = "/tmp/rankwise-errfile-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string path = std::string(templ) + "/error.json";
  EXPECT_FALSE(wire::read_worker_error(path).has_value());
  ::setenv("RANKWISE_ERROR_FILE", path.c_str(), 1);
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  const auto before = Clock::now();
  ASSERT_TRUE(record_error("rankwise: rank 1/2: barrier failed", /*secondary=*/true));
  const auto after = Clock::now();
  ::unsetenv("RANKWISE_ERROR_FILE");
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  const auto e = wire::read_worker_error(path);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->path, path);
  EXPECT_EQ(e->message, "rankwise: rank 1/2: barrier failed");
  EXPECT_TRUE(e->secondary);
  EXPECT_EQ(e->rank, 1);
  // Converted between the clocks: within the call, give or take 1 s (the
  // conversion reads both clocks, and a loaded 2-core machine can stall a
  // thread between the two reads for tens of ms; a wrong conversion is off
  // by hours or years).
  EXPECT_GT(e->time, before - milliseconds(1000));
  EXPECT_LT(e->time, after + milliseconds(1000));
  std::remove(path.c_str());
  ::rmdir(templ);
}

TEST(LaunchErrorFile, PeerGoneIsRankwisesPeerErrorOrGloosIoException) {
  EXPECT_TRUE(is_peer_gone(PeerError("rankwise: rank 0/2: barrier failed: a peer rank probably exited")));
  // Other rankwise errors by their type, whatever they quote.
  EXPECT_FALSE(is_peer_gone(Error("rankwise: DistributedDataParallel: Connection closed by peer")));
  EXPECT_FALSE(is_peer_gone(TimeoutError("rankwise: rank 0/2: barrier failed after a timeout")));
  // Raw c10d/Gloo errors by their type, whatever they say: Gloo's transport
  // error is secondary, Gloo's other errors and libtorch's are not, even with
  // Gloo's words for a closed connection in them.
  EXPECT_TRUE(is_peer_gone(::gloo::IoException("[gloo/transport/tcp/pair.cc:598] something else")));
  EXPECT_FALSE(is_peer_gone(::gloo::Exception("Connection closed by peer [127.0.0.1]:33498")));
  EXPECT_FALSE(is_peer_gone(std::runtime_error(
      "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:33498")));
  EXPECT_FALSE(is_peer_gone(c10::Error({__func__, __FILE__, __LINE__},
                                       "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
                                       "Connection closed by peer [10.0.0.2]:4242")));
  EXPECT_FALSE(is_peer_gone(std::runtime_error("boom")));
}

}  // namespace
}  // namespace rankwise::launch
