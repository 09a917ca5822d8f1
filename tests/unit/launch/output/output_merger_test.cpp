// Lines a worker rewrites with '\r' (a progress bar): LineAssembler's view of
// the unfinished line, and OutputMerger showing it in place on a terminal
// (one line at the bottom, redrawn below whole lines) but never in a pipe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "launch/output/console_streams.h"
#include "launch/output/line_assembler.h"
#include "launch/output/output_merger.h"

namespace rankwise::launch {
using namespace rankwise::launch::output;
namespace {

TEST(LaunchLineAssembler, RewrittenLineIsTheBarBetweenUpdates) {
  launch::output::LineAssembler a;
  std::vector<std::string> lines;
  auto emit = [&](std::string_view line, bool) { lines.emplace_back(line); };
  a.feed("plain", 5, emit);
  EXPECT_EQ(a.rewritten_line(), "");  // not yet ended, but nothing rewrote it
  a.feed(" line\n\r 10%", 11, emit);
  EXPECT_EQ(a.rewritten_line(), " 10%");
  a.feed("\r 20%", 5, emit);
  EXPECT_EQ(a.rewritten_line(), " 20%");
  a.feed("\r100%\n", 6, emit);
  EXPECT_EQ(a.rewritten_line(), "");  // ended: a whole line now
  EXPECT_EQ(lines, (std::vector<std::string>{"plain line", "100%"}));
}

// Everything the merger wrote to its stdout and stderr, read back from a pipe.
class InPlace : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::pipe2(fds_, O_NONBLOCK), 0); }
  void TearDown() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  launch::output::MergerOptions options(bool terminal) {
    launch::output::MergerOptions o;
    o.tags = {"[rank0]: ", "[rank1]: "};
    o.ranks = {0, 1};
    o.stdout_fd = fds_[1];
    o.stderr_fd = fds_[1];
    o.terminal = terminal;
    return o;
  }
  std::string written() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    return out;
  }
  static void feed(launch::output::OutputMerger& m, std::size_t worker, launch::output::Stream stream, const std::string& text) {
    m.on_data(worker, stream, text.data(), text.size());
  }
  int fds_[2] = {-1, -1};
};

TEST_F(InPlace, TerminalShowsTheBarInPlaceAndRedrawsItBelowWholeLines) {
  launch::output::OutputMerger m(options(/*terminal=*/true));
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 1/3");
  EXPECT_EQ(written(), "[rank0]: bar 1/3");
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 2/3");
  EXPECT_EQ(written(), "\r\x1b[K[rank0]: bar 2/3");
  feed(m, 1, launch::output::Stream::kStdout, "a whole line\n");  // printed above the bar, which is redrawn
  EXPECT_EQ(written(), "\r\x1b[K[rank1]: a whole line\n[rank0]: bar 2/3");
  feed(m, 1, launch::output::Stream::kStderr, "an error line\n");
  EXPECT_EQ(written(), "\r\x1b[K[rank1]: an error line\n[rank0]: bar 2/3");
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 3/3\n");  // the bar's line ends: a whole line, not redrawn
  EXPECT_EQ(written(), "\r\x1b[K[rank0]: bar 3/3\n");
  feed(m, 1, launch::output::Stream::kStdout, "after\n");
  EXPECT_EQ(written(), "[rank1]: after\n");
}

// The launcher's own messages (a stall, a signal, a hang report) go between
// the lines too: never onto the end of the bar.
TEST_F(InPlace, TheLaunchersOwnLinesNeverLandOnTheBar) {
  launch::output::OutputMerger m(options(/*terminal=*/true));
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 1/3");
  EXPECT_EQ(written(), "[rank0]: bar 1/3");
  m.write_own(fds_[1], "rankwise-run: stalled: rank 1\n");
  EXPECT_EQ(written(), "\r\x1b[Krankwise-run: stalled: rank 1\n[rank0]: bar 1/3");
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 2/3\n");
  EXPECT_EQ(written(), "\r\x1b[K[rank0]: bar 2/3\n");
  m.write_own(fds_[1], "rankwise-run: done\n");  // no bar shown: the text alone
  EXPECT_EQ(written(), "rankwise-run: done\n");
}

TEST_F(InPlace, PipeGetsWholeLinesOnly) {
  launch::output::OutputMerger m(options(/*terminal=*/false));
  EXPECT_FALSE(m.shows_in_place(0));
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 1/3");
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 2/3");
  feed(m, 1, launch::output::Stream::kStdout, "a whole line\n");
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 3/3\n");
  EXPECT_EQ(written(), "[rank1]: a whole line\n[rank0]: bar 3/3\n");
}

TEST_F(InPlace, OnlyWorkersWhoseStdoutReachesTheTerminal) {
  launch::output::MergerOptions o = options(/*terminal=*/true);
  o.console = {launch::output::kBothStreams, launch::output::kStderrBit};  // rank 1's stdout filtered (--only-ranks 0)
  launch::output::OutputMerger m(o);
  EXPECT_TRUE(m.shows_in_place(0));
  EXPECT_FALSE(m.shows_in_place(1));
  feed(m, 1, launch::output::Stream::kStdout, "\rhidden bar");
  EXPECT_EQ(written(), "");
  launch::output::MergerOptions grouped = options(/*terminal=*/true);
  grouped.group_by_rank = true;
  EXPECT_FALSE(launch::output::OutputMerger(grouped).shows_in_place(0));
}

TEST_F(InPlace, AStreamEndingMidBarLeavesItsLastStateAsALine) {
  launch::output::OutputMerger m(options(/*terminal=*/true));
  feed(m, 0, launch::output::Stream::kStdout, "\rbar 1/3");
  EXPECT_EQ(written(), "[rank0]: bar 1/3");
  m.on_eof(0, launch::output::Stream::kStdout);
  EXPECT_EQ(written(), "\r\x1b[K[rank0]: bar 1/3\n");
}

}  // namespace
}  // namespace rankwise::launch
