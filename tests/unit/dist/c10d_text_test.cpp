// A failed rendezvous says why in rankwise's words: a peer that closed its
// connection is not called a timeout (texts as Gloo and c10d write them).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "dist/c10d_text.h"

namespace {

using rankwise::dist::rendezvous_failure_cause;
using namespace std::chrono_literals;

TEST(RendezvousFailureCause, APeerThatClosedItsConnectionIsNotATimeout) {
  const std::string cause = rendezvous_failure_cause(
      "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
      "[127.0.0.1]:40392",
      60000ms);
  EXPECT_NE(cause.find("another rank closed its connection"), std::string::npos) << cause;
  EXPECT_EQ(cause.find("timeout"), std::string::npos) << cause;
  EXPECT_EQ(cause.find("60000"), std::string::npos) << cause;
}

TEST(RendezvousFailureCause, AResetConnectionIsAPeerThatLeft) {
  EXPECT_NE(rendezvous_failure_cause("Connection reset by peer", 1000ms).find("closed its connection"),
            std::string::npos);
}

TEST(RendezvousFailureCause, ATimeoutNamesTheLimit) {
  EXPECT_EQ(rendezvous_failure_cause(
                "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                "1500ms for recv operation to complete",
                1500ms),
            "not every rank arrived within 1500 ms (InitOptions::timeout)");
  EXPECT_NE(rendezvous_failure_cause("Socket Timeout", 2000ms).find("2000 ms"), std::string::npos);
}

TEST(RendezvousFailureCause, OtherTextsAddNoCause) {
  EXPECT_EQ(rendezvous_failure_cause("Connection refused", 1000ms), "");
}

}  // namespace
