// How the failure summary names signals and exit codes (launch/workers/summary.h).
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

TEST(LaunchSummary, NamesSignalsAndExitCodes) {
  EXPECT_EQ(launch::workers::signal_name(9), "SIGKILL");
  EXPECT_EQ(launch::workers::signal_name(15), "SIGTERM");
  launch::workers::WorkerRecord w;
  w.exit_code = 3;
  EXPECT_EQ(launch::workers::describe_exit(w), "exited with code 3");
  w.term_signal = 11;
  EXPECT_EQ(launch::workers::describe_exit(w), "was killed by SIGSEGV (signal 11)");
}

}  // namespace

}  // namespace rankwise::launch
