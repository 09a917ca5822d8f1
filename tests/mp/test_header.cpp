// rankwise-test-nproc: 2
// print_header() on 2 ranks: rank 0 prints the summary line and one line per
// rank (rank, local rank, host, pid, device, physical GPU); rank 1 prints nothing.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "rankwise/monitor/job_header.h"
#include "rankwise/env.h"
#include "rankwise/log.h"
#include "rankwise/dist/process_group.h"

namespace {

// Runs `f` with file descriptor 1 on a temporary file (print_line writes with
// write(2) to fd 1, so gtest's CaptureStdout would not see it); returns the text.
template <typename F>
std::string capture_fd1(F f) {
  char path[] = "/tmp/rankwise_header_XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  std::fflush(stdout);
  const int saved = ::dup(1);
  ::dup2(fd, 1);
  try {
    f();
  } catch (...) {
    ::dup2(saved, 1);
    throw;
  }
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

TEST(Header, RankZeroPrintsEveryRanksLine) {
  auto& group = rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
  const int rank = group.rank(), world = group.world_size();
  ASSERT_EQ(world, 2);

  const std::string out = capture_fd1([] { rankwise::monitor::print_header(); });
  auto pids = rankwise::dist::all_gather(torch::tensor({static_cast<int64_t>(::getpid())}));

  if (rank != 0) {
    EXPECT_EQ(out, "") << "only rank 0 prints the header";
    return;
  }
  const auto lines = lines_of(out);
  ASSERT_EQ(lines.size(), 1u + world) << out;
  // The summary line keeps the format the end-to-end tests grep for.
  EXPECT_TRUE(std::regex_search(lines[0], std::regex("^rankwise .* world size: 2 \\| backend: gloo$")))
      << lines[0];
  // Which CRC-32 this build has (ISA-L, or zlib where ISA-L was not found).
  EXPECT_TRUE(std::regex_search(lines[0], std::regex("\\| CRC-32: (ISA-L|zlib) \\|"))) << lines[0];
  int summary = 0;
  for (const auto& l : lines) summary += std::regex_search(l, std::regex("rankwise .*world size"));
  EXPECT_EQ(summary, 1) << out;

  // The device columns from the documented rule, not from assign_device():
  // one node (local rank == rank); local rank r on cuda:r when every rank has
  // a GPU of its own, the physical GPU being the r-th CUDA_VISIBLE_DEVICES
  // entry (r itself when the variable is unset); else the CPU ("-").
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  std::vector<std::string> visible;
  const auto cvd = rankwise::get_env("CUDA_VISIBLE_DEVICES");
  if (cvd) {
    std::stringstream entries(*cvd);
    for (std::string entry; std::getline(entries, entry, ',');) visible.push_back(entry);
  }
  for (int r = 0; r < world; ++r) {
    const bool on_gpu = gpus >= world;
    const std::string device = on_gpu ? "cuda:" + std::to_string(r) : "cpu";
    const std::string physical =
        !on_gpu ? "-" : cvd ? visible.at(r) : std::to_string(r);
    const std::string expected =
        "  rank " + std::to_string(r) + " | local rank " + std::to_string(r) + " | host " +
        host_name() + " | pid " + std::to_string(pids[r].item<int64_t>()) + " | device " +
        device + " | physical GPU " + physical;
    EXPECT_EQ(lines[1 + r], expected);
  }
}

TEST(Header, CalledTwiceStaysInStep) {
  // Collective: a second call on every rank gathers again without mixing up.
  const std::string out = capture_fd1([] { rankwise::monitor::print_header(); });
  if (rankwise::dist::rank() == 0) {
    EXPECT_EQ(lines_of(out).size(), 3u) << out;
  } else {
    EXPECT_EQ(out, "");
  }
  rankwise::dist::barrier();
}
