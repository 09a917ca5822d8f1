// The process group's threads: InitOptions::gloo_threads starts that many
// Gloo worker threads (counted in /proc/self/task; below 1 is a
// ConfigError), and RANKWISE_CPU_SCHED=auto runs them under SCHED_OTHER and
// the calling thread under SCHED_BATCH (policies read back from /proc).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "launch/free_port.h"
#include "rankwise/error.h"
#include "rankwise/process_group.h"

namespace {

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

rankwise::LaunchEnv one_rank(const std::string& cpu_sched = "auto") {
  return rankwise::LaunchEnv::from_map(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", std::to_string(rankwise::launch::find_free_port("127.0.0.1"))},
       {"RANKWISE_CPU_SCHED", cpu_sched}});
}

// Policy of each thread of this process (field 41 of /proc/self/task/T/stat).
std::map<pid_t, int> thread_policies() {
  std::map<pid_t, int> result;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 41 && fields >> field; ++i) {
      if (i == 41) result[static_cast<pid_t>(std::stoi(entry.path().filename()))] = std::stoi(field);
    }
  }
  return result;
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

TEST(CpuSched, AutoRunsCommunicationNormalAndTheCallerBatch) {
  sched_param param{};
  ASSERT_EQ(::sched_setscheduler(0, SCHED_BATCH, &param), 0);  // e.g. started under chrt -b
  const auto before = thread_policies();
  {
    rankwise::ProcessGroup group(one_rank("auto"), rankwise::InitOptions().timeout(std::chrono::seconds(30)));
    int started = 0;
    for (const auto& [tid, policy] : thread_policies()) {
      if (tid == ::gettid()) {
        EXPECT_EQ(policy, SCHED_BATCH) << "the calling thread";
      } else if (!before.count(tid)) {
        ++started;
        EXPECT_EQ(policy, SCHED_OTHER) << "thread " << tid << " the group started";
      }
    }
    EXPECT_GE(started, 3) << "Gloo's loop thread and 2 worker threads at least";
  }
  ASSERT_EQ(::sched_setscheduler(0, SCHED_OTHER, &param), 0);
  // inherit (or an explicit whole-process policy from the launcher): untouched.
  rankwise::ProcessGroup group(one_rank("inherit"), rankwise::InitOptions().timeout(std::chrono::seconds(30)));
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
  EXPECT_THROW(one_rank("fifo"), rankwise::ConfigError);
}
