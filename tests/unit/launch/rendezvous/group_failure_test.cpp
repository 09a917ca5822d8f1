// A multi-node job fails and restarts as one group (launch/rendezvous/group_failure.h):
// a worker failing on node 1 stops node 0's workers within seconds, both
// launchers name the same root cause, and with --max-restarts every node
// restarts together after a rendezvous round; a node that leaves the job is
// named. The two nodes are two launchers on the loopback address; the
// network-namespace version with the main job is e2e.multinode_netns.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <regex>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "launch/rendezvous/free_port.h"
#include "launch/rendezvous/group_failure.h"
#include "launch/rendezvous/launcher_heartbeat.h"
#include "launch/rendezvous/node_rendezvous.h"
#include "support/launcher.h"
#include "support/store.h"

namespace {

using namespace rankwise::test;
using rankwise::launch::rendezvous::GroupFailureWatch;
using rankwise::launch::rendezvous::NodeFailure;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// Polls `watch` until its first failure satisfies `done`, at most 10 s.
template <typename Done>
std::optional<NodeFailure> first_when(const GroupFailureWatch& watch, Done done) {
  std::optional<NodeFailure> f;
  eventually([&] { return done(f = watch.first()); }, 10);
  return f;
}

// A store on the loopback address, as node 0's launcher hosts it.
std::unique_ptr<c10d::TCPStore> store_server(int port) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;
  return std::make_unique<c10d::TCPStore>("127.0.0.1", o);
}

TEST(GroupFailure, TheFirstFailureStaysAndItsFinalDetailsReplaceIt) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const auto server = store_server(port);
  const auto interval = std::chrono::milliseconds(50);
  GroupFailureWatch node0("127.0.0.1", port, "rankwise/k/0", "k", interval, 0, 2);
  GroupFailureWatch node1("127.0.0.1", port, "rankwise/k/0", "k", interval, 1, 2);
  GroupFailureWatch other_attempt("127.0.0.1", port, "rankwise/k/1", "k", interval, 1, 2);
  EXPECT_FALSE(node0.first());

  node1.report({1, "rank 3 (local rank 1) on host h1 (node 1) was killed by SIGKILL (signal 9)", ""});
  ASSERT_TRUE(node1.flush(std::chrono::seconds(5)));
  node0.report({0, "rank 0 (local rank 0) on host h0 (node 0) exited with code 1", "peer gone"});
  ASSERT_TRUE(node0.flush(std::chrono::seconds(5)));
  for (const GroupFailureWatch* w : {&node0, &node1}) {
    const auto f = first_when(*w, [](const auto& f) { return f.has_value(); });
    ASSERT_TRUE(f);
    EXPECT_EQ(f->node_rank, 1);  // node 0's later report did not replace it
    EXPECT_EQ(f->root_cause, "rank 3 (local rank 1) on host h1 (node 1) was killed by SIGKILL (signal 9)");
    EXPECT_FALSE(f->final);
  }

  node1.report_final({1, "rank 2 (local rank 0) on host h1 (node 1) exited with code 3", "boom"});
  const auto f = first_when(node0, [](const auto& f) { return f && f->final; });
  ASSERT_TRUE(f && f->final);
  EXPECT_EQ(f->root_cause, "rank 2 (local rank 0) on host h1 (node 1) exited with code 3");
  EXPECT_EQ(f->error, "boom");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a check that nothing follows
  EXPECT_FALSE(other_attempt.first());  // another attempt's keys
}

// The launcher waits for the first read before it starts its workers: a
// node 0 killed at once is still named with its host (it was named "node 0"
// when it went before the first poll).
TEST(GroupFailure, TheFirstReadLearnsTheOtherNodesHosts) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  auto server = store_server(port);
  const std::string host = "h0";
  server->set(rankwise::launch::rendezvous::node_key("k", 0), {host.begin(), host.end()});
  GroupFailureWatch node1("127.0.0.1", port, "rankwise/k/0", "k", std::chrono::hours(1), 1, 2);
  ASSERT_TRUE(node1.wait_until_read(std::chrono::seconds(10)));
  server.reset();  // node 0's launcher and its store are gone
  EXPECT_EQ(node1.node_name(0), "node 0 (host h0)");
  EXPECT_EQ(node1.node_name(2), "node 2");
}

TEST(GroupFailure, EncodedFailuresRoundTripAndOtherTextIsRefused) {
  const NodeFailure f{2, "rank 5 (local rank 1) on host \"x\" (node 2) exited with code 1", "a\tb"};
  const auto back = rankwise::launch::rendezvous::decode_failure(rankwise::launch::rendezvous::encode_failure(f));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->node_rank, 2);
  EXPECT_EQ(back->root_cause, f.root_cause);
  EXPECT_EQ(back->error, "a\tb");
  for (const std::string bad : {"", "{", "[]", "{\"node_rank\": \"one\"}", "{\"node_rank\": 1}"}) {
    EXPECT_FALSE(rankwise::launch::rendezvous::decode_failure(bad)) << bad;
  }
}

TEST(GroupFailure, ANodeThatLeftTheJobIsReadUnlessItSucceeded) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const auto server = store_server(port);
  auto close = [&](const NodeFailure& f) {
    const std::string v = rankwise::launch::rendezvous::encode_failure(f);
    server->set(rankwise::launch::rendezvous::closed_key("k"), std::vector<uint8_t>(v.begin(), v.end()));
  };
  GroupFailureWatch watch("127.0.0.1", port, "rankwise/k/0", "k", std::chrono::milliseconds(50),
                          0, 2);
  NodeFailure done{1, "node 1 (host h1) left the job: its workers succeeded", ""};
  done.succeeded = true;
  close(done);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // 6 polls: no failure reported
  EXPECT_FALSE(watch.first());  // a node whose workers succeeded is no failure
  close({1, "node 1 (host h1) left the job: it received SIGINT", ""});
  const auto f = first_when(watch, [](const auto& f) { return f.has_value(); });
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->left);
  EXPECT_EQ(f->root_cause, "node 1 (host h1) left the job: it received SIGINT");
}

TEST(GroupFailure, SilenceTrackerNamesTheNodeWhoseCounterStopped) {
  using rankwise::launch::rendezvous::SilenceTracker;
  const auto t0 = SilenceTracker::Clock::now();
  const auto at = [&](int s) { return t0 + std::chrono::seconds(s); };
  SilenceTracker tracker(std::chrono::seconds(15));
  tracker.seen(1, 0, at(0));
  tracker.seen(2, 0, at(0));
  for (int s = 1; s <= 20; ++s) tracker.seen(1, s, at(s));  // node 1 beats; node 2 never does
  EXPECT_FALSE(tracker.silent(at(14)));
  const auto quiet = tracker.silent(at(15));
  ASSERT_TRUE(quiet);
  EXPECT_EQ(quiet->first, 2);
  EXPECT_EQ(quiet->second, std::chrono::seconds(15));
  tracker.forget(2);  // it marked itself exited
  EXPECT_FALSE(tracker.silent(at(20)));
  EXPECT_FALSE(tracker.silent(at(34)));  // node 1's last change was at 20 s
  ASSERT_TRUE(tracker.silent(at(35)));
  EXPECT_EQ(tracker.silent(at(35))->first, 1);
  tracker.seen(1, 20, at(40));  // the same value again is no beat
  EXPECT_EQ(tracker.silent(at(40))->second, std::chrono::seconds(20));
}

// Two launchers, nodes 0 and 1 of a 2 x 2 job on the loopback address,
// running `script` (sh -c) with `extra` options for each node.
std::vector<std::string> node_args(int port, int node, const std::string& script,
                                   const std::vector<std::string>& extra,
                                   const std::string& grace_period = "2") {
  std::vector<std::string> a = {"--nnodes", "2", "--nproc-per-node", "2", "--master-addr",
                                "127.0.0.1", "--master-port", std::to_string(port),
                                "--rendezvous-timeout", "20", "--grace-period", grace_period,
                                "--node-rank", std::to_string(node)};
  a.insert(a.end(), extra.begin(), extra.end());
  a.insert(a.end(), {"sh", "-c", script});
  return a;
}
const std::map<std::string, std::string> kJobKey = {{"RANKWISE_JOB_KEY", "group-failure-test"}};
// A silent launcher is lost after 5 s (1 s x 5) instead of the default 15 s,
// on every node, as a user would set it; the tests that wait for a silence
// end sooner. The default is the same code with another number.
const std::vector<std::string> kSilence5s = {"--rdzv-conf",
                                             "keep_alive_interval=1,keep_alive_max_attempt=5"};
// "for 5 s" .. "for 9 s": a silence of the limit above, measured on a loaded machine.
const std::string kFiveToNineSeconds = "for [5-9] s";

struct TwoNodes {
  Result node0, node1;
};
TwoNodes run_two_nodes(const std::string& script, const std::vector<std::string>& extra0,
                       const std::vector<std::string>& extra1) {
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node1(node_args(port, 1, script, extra1), kJobKey);
  Launcher node0(node_args(port, 0, script, extra0), kJobKey);
  TwoNodes r;
  r.node0 = node0.wait(90);
  r.node1 = node1.wait(90);
  return r;
}

// Rank 3 (node 1) kills itself in attempt 0; the other ranks wait 30 s (as
// in a collective that never completes), or in later attempts say so and end.
const std::string kRankThreeDies =
    "if [ \"$RANKWISE_RESTART_COUNT\" = 0 ]; then"
    "  if [ \"$RANK\" = 3 ]; then kill -9 $$; fi; exec sleep 30;"
    " fi; echo \"rank $RANK attempt $RANKWISE_RESTART_COUNT\"";

TEST(GroupFailure, AWorkerFailingOnNodeOneStopsNodeZerosWorkersAndBothNameIt) {
  const TwoNodes r = run_two_nodes(kRankThreeDies, {}, {});
  const std::string cause = "root cause (first failure): rank 3 (local rank 1) on host " +
                            this_host() + " (node 1) was killed by SIGKILL (signal 9)\n";
  EXPECT_EQ(r.node0.code, 1) << r.node0.err;
  EXPECT_EQ(r.node1.code, 1) << r.node1.err;
  EXPECT_TRUE(contains(r.node0.err, cause)) << r.node0.err;
  EXPECT_TRUE(contains(r.node1.err, cause)) << r.node1.err;
  EXPECT_TRUE(contains(r.node0.err, "rankwise-run: node 1 failed: rank 3 (local rank 1)")) << r.node0.err;
  EXPECT_TRUE(contains(r.node0.err, "reported:   by node 1's launcher")) << r.node0.err;
  EXPECT_TRUE(contains(r.node0.err, "stopped its workers when node 1's failure was reported")) << r.node0.err;
  EXPECT_TRUE(contains(r.node0.err, "rank 0 (pid ")) << r.node0.err;
  EXPECT_TRUE(contains(r.node0.err, "rank 1 (pid ")) << r.node0.err;
  // Without the group, node 0's workers would have slept their 30 s.
  EXPECT_LT(r.node0.seconds, 10.0) << r.node0.err;
  EXPECT_LT(r.node1.seconds, 10.0) << r.node1.err;
}

TEST(GroupFailure, WithMaxRestartsEveryNodeRestartsTogether) {
  const TwoNodes r = run_two_nodes(kRankThreeDies, {"--max-restarts", "1"}, {"--max-restarts", "1"});
  ASSERT_EQ(r.node0.code, 0) << r.node0.err;
  ASSERT_EQ(r.node1.code, 0) << r.node1.err;
  const std::string restart = "attempt 0 failed (rank 3 (local rank 1) on host " + this_host() +
                              " (node 1) was killed by SIGKILL (signal 9)); restarting (1/1) with "
                              "every node";
  EXPECT_TRUE(contains(r.node0.err, restart)) << r.node0.err;
  EXPECT_TRUE(contains(r.node1.err, "attempt 0 failed (rank 3 was killed by SIGKILL (signal 9)); "
                                    "restarting (1/1) with every node"))
      << r.node1.err;
  for (int rank = 0; rank < 4; ++rank) {
    const Result& node = rank < 2 ? r.node0 : r.node1;
    EXPECT_TRUE(contains(node.out, "rank " + std::to_string(rank) + " attempt 1\n")) << node.out;
  }
  EXPECT_LT(r.node0.seconds, 15.0) << r.node0.err;
}

TEST(GroupFailure, ANodeThatDoesNotComeBackForTheRestartIsNamed) {
  // Node 1 may not restart: it gives up and leaves; node 0, which may, stops
  // waiting for the restart's rendezvous at once and names it.
  const TwoNodes r = run_two_nodes(kRankThreeDies, {"--max-restarts", "1"}, {});
  EXPECT_EQ(r.node1.code, 1) << r.node1.err;
  EXPECT_EQ(r.node0.code, 1) << r.node0.err;
  EXPECT_TRUE(contains(r.node0.err, "rendezvous for restart 1 cannot complete: node 1 (host " +
                                        this_host() + ") left the job: it gave up (0 restarts allowed)"))
      << r.node0.err;
  EXPECT_LT(r.node0.seconds, 15.0) << r.node0.err;  // not the rendezvous timeout (20 s)
}

TEST(GroupFailure, ANodeWhoseWorkersSucceededReportsTheOthersLaterFailure) {
  // Node 0's workers end at once; rank 3 on node 1 fails 2 s later. Before,
  // node 0 exited 0 without a word.
  const TwoNodes r = run_two_nodes(
      "if [ \"$GROUP_RANK\" = 1 ]; then sleep 2; [ \"$RANK\" = 3 ] && exit 9; sleep 5; fi", {}, {});
  EXPECT_EQ(r.node1.code, 1) << r.node1.err;
  EXPECT_EQ(r.node0.code, 1) << r.node0.err;
  EXPECT_TRUE(contains(r.node0.err, "this node's workers succeeded, but the job failed: node 1 "
                                    "failed: rank 3 (local rank 1) on host " + this_host() +
                                    " (node 1) exited with code 9"))
      << r.node0.err;
  EXPECT_LT(r.node0.seconds, 10.0) << r.node0.err;
}

TEST(GroupFailure, ALauncherThatIsStoppedStopsTheOtherNodesWorkers) {
  // SIGTERM to node 1's launcher: node 0's workers (30 s) are stopped and
  // node 0 names node 1. Before, node 0 ran its workers to their end, exit 0.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node0(node_args(port, 0, "echo started; exec sleep 30", {}), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  Launcher node1(node_args(port, 1, "echo started; exec sleep 30", {}), kJobKey);
  // Both nodes' workers run (not a fixed sleep: a loaded machine may take
  // longer than that to start a launcher).
  ASSERT_TRUE(node0.wait_for_out("started", 60));
  ASSERT_TRUE(node1.wait_for_out("started", 60));
  ::kill(node1.pid(), SIGTERM);
  const Result r1 = node1.wait(60), r0 = node0.wait(60);
  EXPECT_EQ(r1.code, 143) << r1.err;
  EXPECT_EQ(r0.code, 1) << r0.err;
  const std::string left = "node 1 (host " + this_host() + ") left the job: it received SIGTERM";
  EXPECT_TRUE(contains(r0.err, "rankwise-run: " + left + "; stopping this node's workers")) << r0.err;
  EXPECT_TRUE(contains(r0.err, "root cause (first failure): " + left)) << r0.err;
  EXPECT_LT(r0.seconds, 10.0) << r0.err;
}

TEST(GroupFailure, ALauncherKilledWithSigkillIsNamedByTheOtherNode) {
  // SIGKILL to node 1's launcher: it can say nothing, and its workers die
  // with it; node 0's workers (60 s, as in a collective that never ends on
  // a backend that does not notice) are stopped once node 1's heartbeat has
  // been still for the silence limit (5 s here), and node 0 names node 1.
  // Before: node 0 ran them to their end and exited 0.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node0(node_args(port, 0, "echo started; exec sleep 60", kSilence5s), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  Launcher node1(node_args(port, 1, "echo started; exec sleep 60", kSilence5s), kJobKey);
  ASSERT_TRUE(node0.wait_for_out("started", 60));  // both nodes' workers run
  ASSERT_TRUE(node1.wait_for_out("started", 60));
  ::kill(node1.pid(), SIGKILL);
  EXPECT_EQ(node1.wait(20).code, 128 + SIGKILL);  // collected now: its deadline counts from its start
  const Result r0 = node0.wait(90);
  EXPECT_EQ(r0.code, 1) << r0.err;
  const std::string silent = "node 1 \\(host " + this_host() +
                             "\\)'s launcher stopped answering: its heartbeat in the store has not "
                             "changed " + kFiveToNineSeconds;
  EXPECT_TRUE(std::regex_search(r0.err, std::regex("rankwise-run: " + silent))) << r0.err;
  EXPECT_TRUE(std::regex_search(r0.err, std::regex("root cause \\(first failure\\): " + silent)))
      << r0.err;
  EXPECT_TRUE(contains(r0.err, "reported:   by nobody: node 1's launcher could not say anything"))
      << r0.err;
  // Node 0 does not then wait for the node it knows is gone (before: 12 s
  // more, in silence, for it to read the failure).
  EXPECT_FALSE(contains(r0.err, "waiting up to")) << r0.err;
  EXPECT_LT(r0.seconds, 20.0) << r0.err;  // not the workers' 60 s
}

// Node `early`'s workers end after 1 s, the other node's after 60 s.
std::string one_node_ends_early(int early) {
  return "if [ \"$GROUP_RANK\" = " + std::to_string(early) + " ]; then exec sleep 1; fi; exec sleep 60";
}

TEST(GroupFailure, ANodeWaitingAtItsEndNamesAKilledPeer) {
  // Node 0's workers succeeded and it waits for node 1, whose launcher is
  // then SIGKILLed. Before: node 0 waited out its timeout (20 s here, 300 s
  // by default) and exited 0, the job's failure unsaid.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node0(node_args(port, 0, one_node_ends_early(0), kSilence5s), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  Launcher node1(node_args(port, 1, one_node_ends_early(0), kSilence5s), kJobKey);
  ASSERT_TRUE(node0.wait_for_err("waiting up to", 60));  // node 0 waits at its end
  ::kill(node1.pid(), SIGKILL);
  EXPECT_EQ(node1.wait(20).code, 128 + SIGKILL);
  const Result r0 = node0.wait(60);
  EXPECT_EQ(r0.code, 1) << r0.err;
  EXPECT_TRUE(contains(r0.err, "rankwise-run: this node's workers succeeded; waiting up to 20 s "
                               "for the other nodes to finish (1 of 2 have; Ctrl-C to stop "
                               "waiting, which ends the job on every node: this node hosts its "
                               "store)\n"))
      << r0.err;
  EXPECT_TRUE(contains(r0.err, "rankwise-run: this node's workers succeeded, but the job failed: "
                               "node 1 (host " + this_host() + ")'s launcher stopped answering"))
      << r0.err;
}

TEST(GroupFailure, ANodeWaitingAtItsEndNamesALostStoreHost) {
  // The reverse: node 1 waits at its end and node 0's launcher, which hosts
  // the store, is SIGKILLed. Before: node 1 exited 0 at once.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node0(node_args(port, 0, one_node_ends_early(1), {}), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  Launcher node1(node_args(port, 1, one_node_ends_early(1), {}), kJobKey);
  ASSERT_TRUE(node1.wait_for_err("waiting up to", 60));  // node 1 waits at its end
  ::kill(node0.pid(), SIGKILL);
  EXPECT_EQ(node0.wait(20).code, 128 + SIGKILL);
  const Result r1 = node1.wait(60);
  EXPECT_EQ(r1.code, 1) << r1.err;
  EXPECT_TRUE(contains(r1.err, "rankwise-run: this node's workers succeeded, but the job failed: "
                               "node 0's launcher, which hosts the rendezvous store at 127.0.0.1:" +
                               std::to_string(port) + ", stopped answering: its store went away "
                               "while this node waited for the others to finish"))
      << r1.err;
}

TEST(GroupFailure, ASignalWhileWaitingAtTheEndExits128PlusIt) {
  // SIGINT to node 0 while it waits for node 1 at its end: exit 130, said.
  // Before: exit 0, silently.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node0(node_args(port, 0, one_node_ends_early(0), kSilence5s), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  Launcher node1(node_args(port, 1, one_node_ends_early(0), kSilence5s), kJobKey);
  // Once it waits (said after 2 s of it); a fixed sleep could signal a
  // launcher that a loaded machine had not even started yet.
  ASSERT_TRUE(node0.wait_for_err("waiting up to", 60));
  ::kill(node0.pid(), SIGINT);
  const Result r0 = node0.wait(30);
  EXPECT_EQ(r0.code, 128 + SIGINT) << r0.err;
  EXPECT_TRUE(contains(r0.err, "rankwise-run: received SIGINT while waiting for the other nodes "
                               "to finish; exiting\n"))
      << r0.err;
  const Result r1 = node1.wait(60);
  EXPECT_EQ(r1.code, 1) << r1.err;  // its store went with node 0, lost after 5 s
}

TEST(GroupFailure, ALostStoreHostIsNamedByTheOtherNode) {
  // SIGKILL to node 0's launcher, which hosts the store: node 1 names it.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node0(node_args(port, 0, "echo started; exec sleep 60", kSilence5s), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  Launcher node1(node_args(port, 1, "echo started; exec sleep 60", kSilence5s), kJobKey);
  ASSERT_TRUE(node0.wait_for_out("started", 60));  // both nodes' workers run
  ASSERT_TRUE(node1.wait_for_out("started", 60));
  ::kill(node0.pid(), SIGKILL);
  EXPECT_EQ(node0.wait(20).code, 128 + SIGKILL);
  const Result r1 = node1.wait(90);
  EXPECT_EQ(r1.code, 1) << r1.err;
  const std::string lost = "node 0 \\(host " + this_host() +
                           "\\)'s launcher, which hosts the rendezvous store at 127\\.0\\.0\\.1:" +
                           std::to_string(port) + ", stopped answering: no store call has "
                           "succeeded " + kFiveToNineSeconds;
  EXPECT_TRUE(std::regex_search(r1.err, std::regex("rankwise-run: " + lost))) << r1.err;
  EXPECT_TRUE(std::regex_search(r1.err, std::regex("root cause \\(first failure\\): " + lost)))
      << r1.err;
  EXPECT_LT(r1.seconds, 35.0) << r1.err;  // not the workers' 60 s
  // Without libtorch's log lines for each failed store call (Debian's 1.13
  // printed a dozen "E1203 ... socket.cpp:860] [c10d] The client socket has
  // timed out ..." through glog before the launcher's message).
  EXPECT_FALSE(contains(r1.err, "socket.cpp")) << r1.err;
  EXPECT_FALSE(contains(r1.err, "[c10d]")) << r1.err;
}

TEST(GroupFailure, ALauncherThatExitedIsNotReportedSilent) {
  // Node 1's workers succeed at once and its launcher waits for node 0 only
  // 3 s (--rendezvous-timeout 3, the last one given), then exits, marking
  // itself exited; node 0's workers run 12 s, past the 5 s silence limit
  // set here, and succeed.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const std::string script = "if [ \"$GROUP_RANK\" = 0 ]; then exec sleep 12; fi";
  Launcher node0(node_args(port, 0, script, kSilence5s), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  std::vector<std::string> extra1 = kSilence5s;
  extra1.insert(extra1.end(), {"--rendezvous-timeout", "3"});
  Launcher node1(node_args(port, 1, script, extra1), kJobKey);
  const Result r1 = node1.wait(60), r0 = node0.wait(90);
  EXPECT_EQ(r1.code, 0) << r1.err;
  EXPECT_TRUE(contains(r1.err, "rankwise-run: this node's workers succeeded; waiting up to 3 s for "
                               "the other nodes to finish (1 of 2 have; Ctrl-C to stop waiting)\n"))
      << r1.err;
  EXPECT_EQ(r0.code, 0) << r0.err;
  EXPECT_FALSE(contains(r0.err, "stopped answering")) << r0.err;
}

TEST(GroupFailure, ANodeThatLeavesDuringTheRestartRoundIsNotRestartedWithout) {
  // Node 1 is in the rendezvous for restart 1 (it registered) when its
  // launcher gets SIGINT; node 0, still in its grace period (6 s: rank 0
  // ignores SIGTERM), must not restart alone. Before, node 0 ran attempt 1 with its
  // two ranks only and exited 0.
  const std::string script =
      "if [ \"$RANKWISE_RESTART_COUNT\" = 0 ]; then"
      "  [ \"$RANK\" = 3 ] && exit 5; [ \"$RANK\" = 0 ] && trap '' TERM; sleep 30; exit 0;"
      " fi; echo \"rank $RANK attempt $RANKWISE_RESTART_COUNT\"";
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher node0(node_args(port, 0, script, {"--max-restarts", "1"}, "6"), kJobKey);
  ASSERT_TRUE(wait_for_listener(port));  // node 0 hosts the store
  Launcher node1(node_args(port, 1, script, {"--max-restarts", "1"}), kJobKey);
  // Node 1 waits in round 1 (once it said so; a fixed sleep could signal it
  // before, on a loaded machine).
  ASSERT_TRUE(node1.wait_for_err("restarting (1/1) with every node", 60));
  // ... and registered in it.
  store_client(port).wait({"rankwise/" + kJobKey.at("RANKWISE_JOB_KEY") + "/round_1/nodes/1"},
                          std::chrono::seconds(30));
  ::kill(node1.pid(), SIGINT);
  const Result r1 = node1.wait(60), r0 = node0.wait(60);
  EXPECT_EQ(r1.code, 130) << r1.err;
  EXPECT_TRUE(contains(r1.err, "received SIGINT during the rendezvous for restart 1")) << r1.err;
  EXPECT_EQ(r0.code, 1) << r0.err;
  EXPECT_TRUE(contains(r0.err, "rendezvous for restart 1 cannot complete: node 1 (host " +
                                   this_host() + ") left the job: it received SIGINT"))
      << r0.err;
  EXPECT_FALSE(contains(r0.out, "attempt 1")) << r0.out;
  EXPECT_LT(r0.seconds, 15.0) << r0.err;
}

TEST(GroupFailure, NodeZeroDoesNotOutwaitTheOthersAfterAFailure) {
  // Node 0 gives up (no restarts) while node 1 may restart: node 1 learns
  // that node 0 left and both exit soon after the failure, not after node
  // 0's exit-barrier wait (the grace period + 10 s) ran out.
  const TwoNodes r = run_two_nodes(kRankThreeDies, {}, {"--max-restarts", "1"});
  EXPECT_EQ(r.node0.code, 1) << r.node0.err;
  EXPECT_EQ(r.node1.code, 1) << r.node1.err;
  EXPECT_TRUE(contains(r.node1.err, "rendezvous for restart 1 cannot complete: node 0")) << r.node1.err;
  EXPECT_LT(r.node0.seconds, 8.0) << r.node0.err;
}

}  // namespace
