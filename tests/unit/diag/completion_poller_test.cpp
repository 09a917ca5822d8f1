// The poller that ends the flight-recorder entries of CUDA collectives:
// works end in launch order, a running work holds back the ones after it,
// failures are told, and the thread ends works on its own.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "diag/completion_poller.h"
#include "support/launcher.h"

using rankwise::diag::CompletionPoller;

namespace {

// A work whose state the test sets: unset while running.
struct FakeWork {
  std::atomic<int> state{0};  // 0 running, 1 completed, 2 failed
  CompletionPoller::Query query() {
    return [this]() -> std::optional<bool> {
      const int s = state.load();
      if (s == 0) return std::nullopt;
      return s == 1;
    };
  }
};

}  // namespace

// An interval of an hour: the thread never polls within these tests, poll_once() does.
TEST(CompletionPoller, AWorkStillRunningHoldsBackTheWorksLaunchedAfterIt) {
  CompletionPoller poller(std::chrono::hours(1));
  FakeWork works[3];
  std::vector<std::string> ended;
  std::mutex ended_mutex;
  for (int i = 0; i < 3; ++i) {
    poller.add(works[i].query(), [&, i](bool ok) {
      std::lock_guard<std::mutex> lock(ended_mutex);
      ended.push_back(std::to_string(i) + (ok ? " ok" : " failed"));
    });
  }
  EXPECT_EQ(poller.poll_once(), 0u);
  works[1].state = 1;  // on one stream the second cannot finish first; if a query says so,
  works[2].state = 2;  // it is still told after the first
  EXPECT_EQ(poller.poll_once(), 0u);
  EXPECT_TRUE(ended.empty());
  EXPECT_EQ(poller.pending(), 3u);
  works[0].state = 1;
  EXPECT_EQ(poller.poll_once(), 3u);
  EXPECT_EQ(ended, (std::vector<std::string>{"0 ok", "1 ok", "2 failed"}));
  EXPECT_EQ(poller.pending(), 0u);
  EXPECT_EQ(poller.poll_once(), 0u);
}

TEST(CompletionPoller, EndsOnlyTheLeadingWorksThatHaveRun) {
  CompletionPoller poller(std::chrono::hours(1));
  FakeWork works[3];
  int ended = 0;
  for (auto& work : works) poller.add(work.query(), [&](bool) { ++ended; });
  works[0].state = 1;
  works[2].state = 1;
  EXPECT_EQ(poller.poll_once(), 1u);
  EXPECT_EQ(ended, 1);
  EXPECT_EQ(poller.pending(), 2u);
  works[1].state = 2;
  EXPECT_EQ(poller.poll_once(), 2u);
  EXPECT_EQ(ended, 3);
}

TEST(CompletionPoller, ItsThreadEndsAWorkOnceItHasRun) {
  CompletionPoller poller(std::chrono::microseconds(200));
  FakeWork work;
  std::atomic<int> told{-1};
  poller.add(work.query(), [&](bool ok) { told = ok ? 1 : 0; });
  EXPECT_EQ(told.load(), -1);  // running: the thread keeps polling and ends nothing
  EXPECT_EQ(poller.pending(), 1u);
  work.state = 2;
  EXPECT_TRUE(rankwise::test::eventually([&] { return told.load() != -1; }, 10));
  EXPECT_EQ(told.load(), 0);
  EXPECT_EQ(poller.pending(), 0u);
}

TEST(CompletionPoller, DestroyingItWithWorksPendingEndsNone) {
  FakeWork work;
  bool ended = false;
  {
    CompletionPoller poller(std::chrono::microseconds(100));
    poller.add(work.query(), [&](bool) { ended = true; });
  }
  EXPECT_FALSE(ended);
}
