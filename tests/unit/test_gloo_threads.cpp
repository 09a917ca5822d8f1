// InitOptions::gloo_threads: ProcessGroupGloo starts that many worker
// threads (counted in /proc/self/task); below 1 is a ConfigError.
#include <gtest/gtest.h>
#include <torch/torch.h>


#include <filesystem>

#include "launch/free_port.h"
#include "rankwise/error.h"
#include "rankwise/process_group.h"

namespace {

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

rankwise::LaunchEnv one_rank() {
  return rankwise::LaunchEnv::from_map(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", std::to_string(rankwise::launch::find_free_port("127.0.0.1"))}});
}

int threads_of_a_group_with(int gloo_threads) {
  const int before = thread_count();
  rankwise::ProcessGroup group(one_rank(),
                               rankwise::InitOptions().gloo_threads(gloo_threads).timeout(std::chrono::seconds(30)));
  auto t = torch::ones({4});
  group.all_reduce(t);  // the group works
  EXPECT_EQ(t[0].item<float>(), 1.0f);
  return thread_count() - before;
}

}  // namespace

TEST(GlooThreads, TheGroupStartsThatManyWorkerThreads) {
  const int one = threads_of_a_group_with(1);
  const int four = threads_of_a_group_with(4);
  EXPECT_EQ(four - one, 3) << "threads with 1: " << one << ", with 4: " << four;
}

TEST(GlooThreads, FewerThanOneIsAConfigError) {
  try {
    rankwise::ProcessGroup group(one_rank(), rankwise::InitOptions().gloo_threads(0));
    FAIL() << "no error";
  } catch (const rankwise::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("InitOptions::gloo_threads is 0; it must be at least 1"),
              std::string::npos)
        << e.what();
  }
}
