// InitOptions::gloo_threads: ProcessGroupGloo starts that many worker
// threads (counted in /proc/self/task; 2 by default); below 1 is a
// ConfigError. RANKWISE_FLIGHT_RECORDER_SIZE, read by the same constructor.
#include <gtest/gtest.h>
#include <torch/torch.h>


#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "launch/rendezvous/free_port.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace {

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

rankwise::LaunchEnv one_rank() {
  return rankwise::LaunchEnv::from_map(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", std::to_string(rankwise::launch::rendezvous::find_free_port("127.0.0.1"))}});
}

// A destroyed group's helper threads (the store's, c10d's) may end a little
// after its destructor returns; wait, up to 5 s, until the count is back to
// what it was before, so one group's leftovers are not counted against the next.
void wait_for_thread_count(int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (thread_count() > expected && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// gloo_threads 0: the default InitOptions.
int threads_of_a_group_with(int gloo_threads, int baseline) {
  wait_for_thread_count(baseline);
  const int before = thread_count();
  auto options = rankwise::dist::InitOptions().timeout(std::chrono::seconds(30));
  if (gloo_threads > 0) options.gloo_threads(gloo_threads);
  rankwise::dist::ProcessGroup group(one_rank(), options);
  auto t = torch::ones({4});
  group.all_reduce(t);  // the group works
  EXPECT_EQ(t[0].item<float>(), 1.0f);
  return thread_count() - before;
}

}  // namespace

TEST(GlooThreads, TheGroupStartsThatManyWorkerThreads) {
  // A first group starts the threads libtorch keeps for the process; the
  // baseline is taken after it.
  threads_of_a_group_with(1, thread_count());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int baseline = thread_count();
  const int one = threads_of_a_group_with(1, baseline);
  const int four = threads_of_a_group_with(4, baseline);
  EXPECT_EQ(four - one, 3) << "threads with 1: " << one << ", with 4: " << four;
  const int by_default = threads_of_a_group_with(0, baseline);  // the README's default: 2
  EXPECT_EQ(by_default - one, 1) << "threads with 1: " << one << ", by default: " << by_default;
}

// RANKWISE_FLIGHT_RECORDER_SIZE: the entries kept (default 2000, 0 = off); a
// bad value is a ConfigError that names it.
TEST(FlightRecorderSize, TheEnvironmentSetsItAndABadValueIsRefused) {
  auto capacity_with = [](const char* value) {
    if (value) ::setenv("RANKWISE_FLIGHT_RECORDER_SIZE", value, 1);
    rankwise::dist::ProcessGroup group(one_rank(), rankwise::dist::InitOptions());
    ::unsetenv("RANKWISE_FLIGHT_RECORDER_SIZE");
    return group.flight_recorder().capacity();
  };
  EXPECT_EQ(capacity_with(nullptr), 2000u);
  EXPECT_EQ(capacity_with("0"), 0u);
  EXPECT_EQ(capacity_with("7"), 7u);
  try {
    capacity_with("lots");
    FAIL() << "no error";
  } catch (const rankwise::ConfigError& e) {
    ::unsetenv("RANKWISE_FLIGHT_RECORDER_SIZE");
    EXPECT_NE(std::string(e.what()).find("RANKWISE_FLIGHT_RECORDER_SIZE='lots' is not a number"),
              std::string::npos)
        << e.what();
  }
}

TEST(GlooThreads, FewerThanOneIsAConfigError) {
  try {
    rankwise::dist::ProcessGroup group(one_rank(), rankwise::dist::InitOptions().gloo_threads(0));
    FAIL() << "no error";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("InitOptions::gloo_threads is 0; it must be at least 1"),
              std::string::npos)
        << e.what();
  }
}
