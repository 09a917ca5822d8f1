// ConsoleStreams (launch/output/console_streams.h): torchrun's --redirects,
// --tee and --local-ranks-filter.
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

/// parse_command_line over `args` (program name prepended), which must succeed.
LaunchOptions parsed(std::vector<std::string> args) {
  args.insert(args.begin(), "rankwise-run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto o = cli::parse_command_line(static_cast<int>(argv.size()), argv.data());
  if (!o) throw std::runtime_error("help was printed");
  return *o;
}

TEST(LaunchConsole, StreamsFollowTorchrunsRedirectsTeeAndFilter) {
  LaunchOptions o;
  o.nproc_per_node = 4;
  // No flags: both streams of every rank.
  EXPECT_EQ(launch::output::console_streams(o, 0, 0), launch::output::kBothStreams);
  // Redirected streams leave the console unless they are tee'd too.
  o.redirects = {launch::output::kBothStreams, launch::output::kStdoutBit, launch::output::kBothStreams, launch::output::kNoStream};
  o.tee = {launch::output::kNoStream, launch::output::kNoStream, launch::output::kStdoutBit, launch::output::kBothStreams};
  EXPECT_EQ(launch::output::console_streams(o, 0, 0), launch::output::kNoStream);
  EXPECT_EQ(launch::output::console_streams(o, 1, 1), launch::output::kStderrBit);
  EXPECT_EQ(launch::output::console_streams(o, 2, 2), launch::output::kStdoutBit);
  EXPECT_EQ(launch::output::console_streams(o, 3, 3), launch::output::kBothStreams);
  // --local-ranks-filter: nothing of the other local ranks, tee'd or not.
  o.local_ranks_filter = {0, 3};
  EXPECT_EQ(launch::output::console_streams(o, 2, 2), launch::output::kNoStream);
  EXPECT_EQ(launch::output::console_streams(o, 3, 3), launch::output::kBothStreams);
  // --only-ranks (global ranks) still hides stdout only.
  o.only_ranks = {0};
  EXPECT_EQ(launch::output::console_streams(o, 3, 7), launch::output::kStderrBit);
  // torchrun's --tee 3 --local-ranks-filter 0.
  const LaunchOptions t =
      parsed({"--nproc-per-node", "2", "--tee", "3", "--local-ranks-filter", "0", "sh"});
  EXPECT_EQ(launch::output::console_streams(t, 0, 0), launch::output::kBothStreams);
  EXPECT_EQ(launch::output::console_streams(t, 1, 1), launch::output::kNoStream);
}

}  // namespace

}  // namespace rankwise::launch
