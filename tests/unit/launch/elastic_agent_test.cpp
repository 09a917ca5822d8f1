// Elastic membership end to end on the loopback address, with two launchers
// as nodes A (hosting the store) and B and a shell script as the program;
// the network-namespace version with the main job is e2e.elastic_netns.
#include <gtest/gtest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "launch/rendezvous/free_port.h"
#include "support/launcher.h"

namespace {

using namespace rankwise::test;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// --nnodes 1:2, two ranks per node; every rank prints its round's view, then
// waits `seconds` (the ranks of a round ending sooner are stopped).
std::vector<std::string> elastic_args(int port, const std::string& id, int seconds) {
  return {"--nnodes", "1:2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
          "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", id,
          "--rdzv-conf", "last_call_timeout=1", "--max-restarts", "2", "--grace-period", "2",
          "--rendezvous-timeout", "30", "sh", "-c",
          "echo \"rank $RANK of $WORLD_SIZE, group $GROUP_RANK of $GROUP_WORLD_SIZE, restart "
          "$RANKWISE_RESTART_COUNT\"; sleep " + std::to_string(seconds)};
}

}  // namespace

TEST(ElasticLaunch, ANodeThatJoinsThenLeavesWithSigtermChangesTheWorldSizeEachTime) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher a(elastic_args(port, "el", 12));
  ASSERT_TRUE(a.wait_for_err("rendezvous round 0: 1 node", 30));
  Launcher b(elastic_args(port, "el", 60));
  ASSERT_TRUE(b.wait_for_err("rendezvous round 1: 2 nodes", 30));
  // Once every worker of round 1 printed its view, B leaves: its launcher
  // gets SIGTERM.
  ASSERT_TRUE(b.wait_for_err("this is node 1", 10));
  for (const char* line : {"rank 0 of 4,", "rank 1 of 4,"}) ASSERT_TRUE(a.wait_for_out(line, 10)) << line;
  for (const char* line : {"rank 2 of 4,", "rank 3 of 4,"}) ASSERT_TRUE(b.wait_for_out(line, 10)) << line;
  ::kill(b.pid(), SIGTERM);
  const Result rb = b.wait(30);
  EXPECT_EQ(rb.code, 128 + SIGTERM) << rb.err;
  const Result ra = a.wait(90);
  EXPECT_EQ(ra.code, 0) << ra.err;
  EXPECT_EQ(count(ra.err, "rankwise-run: rendezvous round "), 3u) << ra.err;
  EXPECT_TRUE(contains(ra.err, "world size 2; this is node 0\n")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "rendezvous round 1: 2 nodes")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "world size 4; this is node 0\n")) << ra.err;
  // B is named: when it leaves, and in the next round's line.
  EXPECT_TRUE(contains(ra.err, "left the job: it received SIGTERM")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "rendezvous round 2: 1 node")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "; left since round 1: node 1 (host ")) << ra.err;
  // Each round's workers saw that round's world: B's ranks 2 and 3 in round 1.
  EXPECT_TRUE(contains(ra.out, "rank 0 of 2, group 0 of 1, restart 0")) << ra.out;
  EXPECT_TRUE(contains(ra.out, "rank 1 of 4, group 0 of 2, restart 1")) << ra.out;
  EXPECT_TRUE(contains(rb.out, "rank 3 of 4, group 1 of 2, restart 1")) << rb.out;
  EXPECT_TRUE(contains(ra.out, "rank 1 of 2, group 0 of 1, restart 2")) << ra.out;
}

TEST(ElasticLaunch, ALauncherOfAnotherJobOrRangeIsRefused) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher a(elastic_args(port, "el", 60));
  ASSERT_TRUE(a.wait_for_err("rendezvous round 0: 1 node", 30));
  Result other = run(elastic_args(port, "el2", 1));
  EXPECT_EQ(other.code, 2) << other.err;
  EXPECT_TRUE(contains(other.err, "this node's --rdzv-id 'el2' differs from node 0's 'el'"))
      << other.err;
  std::vector<std::string> fixed = elastic_args(port, "el", 1);
  fixed[1] = "2";
  Result count_differs = run(fixed);
  EXPECT_EQ(count_differs.code, 2) << count_differs.err;
  EXPECT_TRUE(contains(count_differs.err, "this node's --nnodes 2 --nproc-per-node 2 differ from "
                                          "node 0's --nnodes 1:2"))
      << count_differs.err;
  // Job el went on undisturbed: still its first round.
  ::kill(a.pid(), SIGTERM);
  const Result ra = a.wait(90);
  EXPECT_EQ(ra.code, 128 + SIGTERM) << ra.err;
  EXPECT_EQ(count(ra.err, "rankwise-run: rendezvous round "), 1u) << ra.err;
}
