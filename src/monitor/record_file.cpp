#include "monitor/record_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "core/check.h"
#include "util/io.h"

namespace rankwise::monitor {

RecordFile::RecordFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
  util::ignore_file_size_signal();
  struct stat st {};
  if (::fstat(fd_, &st) == 0) size_ = static_cast<uint64_t>(st.st_size);
}

RecordFile::~RecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordFile::append(std::string_view record) {
  if (fd_ < 0) return;
  if (util::write_all(fd_, record)) {
    size_ += record.size();
    return;
  }
  const int error = errno;
  (void)!::ftruncate(fd_, static_cast<off_t>(size_));  // the torn record off
  ::close(fd_);
  fd_ = -1;
  util::write_line(STDERR_FILENO,
                   core::message("warning: cannot write to '{}': {}; it keeps its whole records and gets "
                                 "no more this run (training goes on)",
                                 path_, util::write_error_text(error)));
}

}  // namespace rankwise::monitor
