// The rendezvous store rankwise-run hosts is not an open door: a client that
// writes the keys it guesses the workers will read cannot spoil the job or
// its restarts (the workers' keys are under a secret job key); on a one-node
// job the store listens on the loopback address only, and a client that
// sends half a message and holds its socket neither slows the job nor delays
// the launcher's exit. Both hold with libtorch 2.x (the store takes a socket the
// launcher bound; c10d's libuv server reads without blocking); libtorch
// 1.13's store listens on every interface and stalls on a partial message
// (docs/launcher.md, "The rendezvous store"), so these tests skip there.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "launch/rendezvous/free_port.h"
#include "launch/rendezvous/node_rendezvous.h"
#include "support/launcher.h"
#include "support/store.h"

namespace {

using namespace rankwise::test;
using Clock = std::chrono::steady_clock;

// Local addresses (hex, as /proc/net/tcp{,6} write them) of the sockets
// listening on `port`.
std::vector<std::string> listening_addresses(int port) {
  std::vector<std::string> found;
  char port_hex[8];
  std::snprintf(port_hex, sizeof(port_hex), "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const auto colon = local.rfind(':');
      if (state == "0A" && local.substr(colon + 1) == port_hex) found.push_back(local.substr(0, colon));
    }
  }
  return found;
}

// As soon as the store on `port` is up: connects and sends one byte of a
// query type and half a length, then leaves the socket open. -1 when the
// store never came up.
int send_partial_message(int port) {
  int fd = -1;
  eventually([&] {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      const unsigned char partial[] = {0, 5, 0, 0};
      if (::send(fd, partial, sizeof(partial), 0) == static_cast<ssize_t>(sizeof(partial))) return true;
    }
    ::close(fd);
    fd = -1;
    return false;
  }, 10);
  return fd;
}

TEST(StoreExposure, AStuckClientDoesNotHoldUpTheLaunchersSignals) {
  // Even where the store stalls on a partial message (libtorch 1.13), the
  // launcher's loop never waits on the store (the hang check reads it on a
  // thread of its own): SIGINT still stops the job at once. Before, on 1.13,
  // the launcher answered only when the client closed.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher launcher({"--nproc-per-node", "2", "--master-port", std::to_string(port),
                     "--grace-period", "1", "sleep", "20"});
  const int fd = send_partial_message(port);
  ASSERT_GE(fd, 0) << "the store never came up on port " << port;
  // The hang check runs and reads the store. A fixed wait: that thread
  // shows no line, and the store it would be stuck on (1.13) answers no
  // other client either.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(launcher.pid(), SIGINT);
  const Result r = launcher.wait(60);
  ::close(fd);
  EXPECT_EQ(r.code, 130) << r.err;
  EXPECT_LT(r.seconds, 1.5 + 1.0 + 4.0) << r.err;  // SIGINT, the grace period, slack
}

TEST(StoreExposure, AStuckClientDoesNotHoldUpTheRendezvous) {
  // Node 0 of two waits for node 1, which never comes, while a client holds
  // half a message. The launcher calls the store on a thread of its own, so
  // SIGINT ends the wait at once. Before, on 1.13, the launcher sat in the
  // store's check() until its own client timed out (the rendezvous timeout).
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  Launcher launcher({"--nnodes", "2", "--node-rank", "0", "--master-port", std::to_string(port),
                     "--rendezvous-timeout", "30", "sleep", "1"},
                    {{"RANKWISE_JOB_KEY", "s3cret"}});
  const int fd = send_partial_message(port);
  ASSERT_GE(fd, 0) << "the store never came up on port " << port;
  // Node 0 waits in the rendezvous. A fixed wait: it shows no line while it
  // waits, and the store a client could read its registration from stalls
  // on the partial message (1.13).
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ::kill(launcher.pid(), SIGINT);
  const Result r = launcher.wait(60);
  ::close(fd);
  EXPECT_EQ(r.code, 130) << r.err;
  EXPECT_NE(r.err.find("received SIGINT during the rendezvous"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 1.0 + 4.0) << r.err;  // SIGINT, slack
}

TEST(StoreExposure, ANodeRegisteredWithoutTheJobKeyDoesNotCount) {
  // Two nodes sharing RANKWISE_JOB_KEY; node 1 never comes. A client that
  // registers it under the key name of old ("rankwise/nodes/1") must not end
  // node 0's wait: the rendezvous times out naming node 1.
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  auto job = std::async(std::launch::async, [&] {
    return run({"--nnodes", "2", "--node-rank", "0", "--master-port", std::to_string(port),
                "--rendezvous-timeout", "3", "sleep", "1"},
               {{"RANKWISE_JOB_KEY", "s3cret"}});
  });
  c10d::TCPStore hostile = store_client(port);
  const std::string value = "evil";
  hostile.set("rankwise/nodes/1", std::vector<uint8_t>(value.begin(), value.end()));
  const Result r = job.get();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("node rank(s) 1 of 2 never arrived"), std::string::npos) << r.err;
}

TEST(StoreExposure, AJobKeyTooLongOrWithOtherCharactersIsAUsageError) {
  for (const std::string key : {std::string(300, 'k'), std::string("a/b")}) {
    const Result r = run({"--nproc-per-node", "2", "sleep", "0"}, {{"RANKWISE_JOB_KEY", key}});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("RANKWISE_JOB_KEY: " + std::to_string(key.size()) + " characters"),
              std::string::npos)
        << r.err;
  }
}

TEST(StoreExposure, GuessedKeysCannotSpoilARestart) {
  // Rank 1 fails attempt 0 after 1.5 s; attempt 1 runs a process group. A
  // client writes garbage under the keys Gloo's rendezvous of attempt 1 would
  // read without a job key ("rankwise/1/<device>/<rank>"): before the job
  // key, attempt 1 died of it (std::bad_alloc, or Gloo's "address.cc:45").
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  const std::string probe = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_world_probe";
  auto job = std::async(std::launch::async, [&] {
    return run({"--nproc-per-node", "2", "--max-restarts", "1", "--master-port",
                std::to_string(port), "sh", "-c",
                "if [ \"$RANKWISE_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then sleep 1.5; "
                "exit 3; fi; exec " + probe});
  });
  c10d::TCPStore hostile = store_client(port);
  const std::string garbage = "garbage";
  for (int r = 0; r < 2; ++r) {
    for (const std::string& key : {"rankwise/1/0/" + std::to_string(r), "rankwise/1/0/rank_" +
                                                                          std::to_string(r)}) {
      hostile.set(key, std::vector<uint8_t>(garbage.begin(), garbage.end()));
    }
  }
  const Result r = job.get();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("attempt 0 failed (rank 1 exited with code 3); restarting (1/1)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("probe rank 1 local_rank 1 node 0 world 2 sum 1"), std::string::npos)
      << r.out;
}

TEST(StoreExposure, OneNodeStoreListensOnLoopbackOnly) {
  if (!rankwise::launch::rendezvous::store_listens_on_master_address_only()) {
    GTEST_SKIP() << "libtorch 1.13's TCPStore has no masterListenFd: it listens on every interface";
  }
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  auto job = std::async(std::launch::async, [&] {
    return run({"--nproc-per-node", "2", "--master-port", std::to_string(port), "sleep", "3"});
  });
  std::vector<std::string> addresses;
  eventually([&] { return !(addresses = listening_addresses(port)).empty(); }, 3);
  const Result r = job.get();
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(addresses.size(), 1u) << "no listening socket found on port " << port;
  EXPECT_EQ(addresses[0], "0100007F") << "127.0.0.1 is 0100007F; 00000000 would be every interface";
}

TEST(StoreExposure, APartialMessageHeldOpenDoesNotStallTheJob) {
  if (!rankwise::launch::rendezvous::store_listens_on_master_address_only()) {
    GTEST_SKIP() << "libtorch 1.13's TCPStore server reads a message with blocking reads: a "
                    "partial message stalls it until the client closes (measured: 45 s instead "
                    "of 6 s); use libtorch 2.x";
  }
  const int port = rankwise::launch::rendezvous::find_free_port("127.0.0.1");
  auto job = std::async(std::launch::async, [&] {
    return run({"--nproc-per-node", "2", "--master-port", std::to_string(port),
                std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_hang_cases", "solo-work"},
               {{"HANG_CASE_TIMEOUT_S", "60"}});
  });
  const int fd = send_partial_message(port);
  ASSERT_GE(fd, 0) << "the store never came up on port " << port;
  // The socket stays open until the job is over (the launcher exits with it open).
  const Result r = job.get();
  ::close(fd);
  EXPECT_EQ(r.code, 0) << r.err;
  // solo-work takes 4 s plus startup; a stalled store would hold it until the
  // socket closed, i.e. forever here.
  EXPECT_LT(r.seconds, 4.0 + 8.0) << r.err;
}

}  // namespace
