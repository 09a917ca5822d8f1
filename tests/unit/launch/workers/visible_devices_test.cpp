// Counting GPUs for --nproc-per-node gpu (launch/workers/visible_devices.h).
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "launch/cli/parse.h"
#include "launch/output/console_streams.h"
#include "launch/workers/cpu_sched.h"
#include "launch/workers/visible_devices.h"
#include "launch/cli/index_list.h"
#include "launch/output/line_assembler.h"
#include "launch/options.h"
#include "launch/cli/rdzv_flags.h"
#include "launch/workers/summary.h"
#include "launch/output/tag_template.h"
#include "launch/workers/worker_group.h"

namespace rankwise::launch {
using namespace rankwise::launch::cli;
using namespace rankwise::launch::output;
using namespace rankwise::launch::rendezvous;
using namespace rankwise::launch::workers;
using namespace rankwise::wire;

namespace {

TEST(LaunchDevices, CountsGpusFromDriverDirAndVisibleDevices) {
  char templ[] = "/tmp/rankwise-gpus-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string dir = templ;
  EXPECT_EQ(launch::workers::visible_gpu_count(std::nullopt, dir + "/absent"), 0);
  EXPECT_EQ(launch::workers::visible_gpu_count(std::string("0,1"), dir + "/absent"), 0);
  for (const char* bus : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}) {
    std::filesystem::create_directory(dir + "/" + bus);
  }
  EXPECT_EQ(launch::workers::visible_gpu_count(std::nullopt, dir), 3);
  EXPECT_EQ(launch::workers::visible_gpu_count(std::string("1,2"), dir), 2);
  EXPECT_EQ(launch::workers::visible_gpu_count(std::string(""), dir), 0);
  EXPECT_EQ(launch::workers::visible_gpu_count(std::string("-1"), dir), 0);
  EXPECT_EQ(launch::workers::visible_gpu_count(std::string("0,7,1"), dir), 1);  // ends at the invalid index
  EXPECT_EQ(launch::workers::visible_gpu_count(std::string("GPU-abc,GPU-def"), dir), 2);
  std::filesystem::remove_all(dir);
}

}  // namespace

}  // namespace rankwise::launch
