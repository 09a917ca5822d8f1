// detail::install_stack_dump: kStackDumpSignal makes the process write every
// thread's stack to RANKWISE_STACK_DUMP_FILE, ending with kStackDumpEnd; a
// program's own handler of that signal is left alone.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "diag/stack_dump.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

TEST(StackDump, EveryThreadIsWrittenToTheFile) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("stack_dump_" + std::to_string(::getpid()))).string();
  ::setenv("RANKWISE_STACK_DUMP_FILE", path.c_str(), 1);
  ASSERT_TRUE(rankwise::diag::install_stack_dump());
  EXPECT_TRUE(rankwise::diag::install_stack_dump());  // once per process
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  int waiting = 0;
  std::condition_variable all_waiting;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      std::unique_lock<std::mutex> lock(m);
      ++waiting;
      all_waiting.notify_one();
      cv.wait(lock, [&] { return done; });
    });
  }
  {
    // Each waiter counted itself holding `m` and released it only inside
    // cv.wait: with the count at 3 under `m`, all three are waiting.
    std::unique_lock<std::mutex> lock(m);
    all_waiting.wait(lock, [&] { return waiting == 3; });
  }
  ::raise(rankwise::wire::kStackDumpSignal);
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_all();
  for (auto& t : waiters) t.join();
  const std::string dump = read_file(path);
  std::filesystem::remove(path);
  EXPECT_EQ(dump.rfind("stack dump of pid " + std::to_string(::getpid()) + "\n", 0), 0u) << dump;
  EXPECT_GE(count(dump, "\nthread "), 4) << dump;  // this one and the 3 waiters
  EXPECT_NE(dump.find("pthread_cond_wait"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("no answer"), std::string::npos) << dump;
  EXPECT_NE(dump.find(std::string(rankwise::wire::kStackDumpEnd) + "\n"), std::string::npos)
      << dump;
}

std::atomic<int> own_handler_calls{0};

TEST(StackDump, TheProgramsOwnHandlerIsKept) {
  // In a fresh process ("threadsafe" re-executes this test), where nothing
  // installed the handler yet.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction own {};
        own.sa_handler = [](int) { ++own_handler_calls; };
        sigemptyset(&own.sa_mask);
        if (::sigaction(rankwise::wire::kStackDumpSignal, &own, nullptr) != 0) std::_Exit(3);
        if (rankwise::diag::install_stack_dump()) std::_Exit(4);
        ::raise(rankwise::wire::kStackDumpSignal);
        std::_Exit(own_handler_calls.load() == 1 ? 0 : 5);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
