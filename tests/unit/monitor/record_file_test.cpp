// monitor::RecordFile on /dev/full, where every write fails with ENOSPC (the
// error of a full disk): one warning naming the file and strerror's text,
// then nothing more is written; a file that takes its records keeps them.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "monitor/record_file.h"

namespace rankwise::monitor {
namespace {

TEST(RecordFile, NoSpaceIsOneWarningNamingTheFileThenNothing) {
  const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::testing::internal::CaptureStderr();
  {
    RecordFile file(fd, "/dev/full");
    for (int i = 0; i < 3; ++i) file.append("{\"step\":1}\n");
    EXPECT_FALSE(file.is_open());
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "rankwise: warning: cannot write to '/dev/full': No space left on device; it keeps its whole "
            "records and gets no more this run (training goes on)\n");
}

TEST(RecordFile, WholeRecordsFollowTheOnesAlreadyThere) {
  const std::string path = ::testing::TempDir() + "rankwise_record_file_" + std::to_string(::getpid());
  std::ofstream(path) << "a\n";
  {
    RecordFile file(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC), path);
    file.append("b\n");
    file.append("c\n");
    EXPECT_TRUE(file.is_open());
  }
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "a\nb\nc\n");
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace rankwise::monitor
