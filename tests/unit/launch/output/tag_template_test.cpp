// TagTemplate (launch/output/tag_template.h): torchrun's --local-ranks-filter
// style tag placeholders, rendered and refused by name.
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

TEST(LaunchTagTemplate, RendersEveryPlaceholder) {
  const launch::output::TagTemplate t =
      launch::output::TagTemplate::parse("{host}:{node_rank}:{rank}/{world_size}:{local_rank} {{x}} ");
  EXPECT_EQ(t.render({5, 1, 2, 8, "h"}), "h:2:5/8:1 {x} ");
  EXPECT_EQ(launch::output::TagTemplate::parse(kDefaultTag).render({3, 0, 0, 4, "h"}), "[rank3]: ");
  EXPECT_EQ(launch::output::TagTemplate::parse("").render({3, 0, 0, 4, "h"}), "");
}

TEST(LaunchTagTemplate, RejectsUnknownPlaceholderNamingIt) {
  try {
    launch::output::TagTemplate::parse("[{rnk}] ");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--tag"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("{rnk}"), std::string::npos) << e.what();
  }
  EXPECT_THROW(launch::output::TagTemplate::parse("[{rank] "), UsageError);
  EXPECT_THROW(launch::output::TagTemplate::parse("rank}"), UsageError);
}

}  // namespace

}  // namespace rankwise::launch
