// LineAssembler (launch/output/line_assembler.h): pieces of a worker's
// stream joined into whole lines, overlong lines split,
// carriage returns kept in place.
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

std::vector<std::string> assemble(const std::vector<std::string>& pieces, bool finish = true) {
  launch::output::LineAssembler a;
  std::vector<std::string> lines;
  auto emit = [&](std::string_view line, bool continued) {
    lines.emplace_back(std::string(line) + (continued ? "<cont>" : ""));
  };
  for (const auto& p : pieces) a.feed(p.data(), p.size(), emit);
  if (finish) a.finish(emit);
  return lines;
}

TEST(LaunchLineAssembler, JoinsPiecesIntoWholeLines) {
  EXPECT_EQ(assemble({"he", "llo\nwor", "ld\n", "\n"}),
            (std::vector<std::string>{"hello", "world", ""}));
}

TEST(LaunchLineAssembler, EmitsUnterminatedRestOnlyAtFinish) {
  EXPECT_TRUE(assemble({"partial"}, /*finish=*/false).empty());
  EXPECT_EQ(assemble({"partial"}), (std::vector<std::string>{"partial"}));
}

TEST(LaunchLineAssembler, CarriageReturnKeepsLastState) {
  EXPECT_EQ(assemble({"\r10%", "\r20%\r", "30%\ndone\r\n"}),
            (std::vector<std::string>{"30%", "done"}));
  // CRLF split across writes is still a plain line end.
  EXPECT_EQ(assemble({"line\r", "\nnext\n"}), (std::vector<std::string>{"line", "next"}));
  EXPECT_EQ(assemble({"\rfinal state\r"}), (std::vector<std::string>{"final state"}));
}

TEST(LaunchLineAssembler, SplitsOverlongLinesWithMarker) {
  const std::string big(launch::output::kMaxLineBytes + 100, 'x');
  const auto lines = assemble({big + "\n"});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(launch::output::kMaxLineBytes, 'x') + "<cont>");
  EXPECT_EQ(lines[1], std::string(100, 'x'));
  // Exactly the limit: not split.
  EXPECT_EQ(assemble({std::string(launch::output::kMaxLineBytes, 'y') + "\n"}).size(), 1u);
}

TEST(LaunchLineAssembler, SplitDoesNotCutUtf8Sequence) {
  // "é" is 0xC3 0xA9; put it across the cut point.
  std::string s(launch::output::kMaxLineBytes - 1, 'a');
  s += "\xC3\xA9tail\n";
  const auto lines = assemble({s});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(launch::output::kMaxLineBytes - 1, 'a') + "<cont>");
  EXPECT_EQ(lines[1], "\xC3\xA9tail");
}

TEST(LaunchLineAssembler, PassesInvalidUtf8Through) {
  EXPECT_EQ(assemble({"a\xff\xfe\n"}), (std::vector<std::string>{"a\xff\xfe"}));
}

}  // namespace

}  // namespace rankwise::launch
