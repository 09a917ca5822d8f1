#pragma once
// A log file that holds whole records only (rank 0's metrics.jsonl,
// metrics.csv and TensorBoard event file). Each record is one write_all();
// when it fails (disk full, a file size limit), the torn bytes are cut off,
// a warning on stderr names the file and the reason, and the file takes no
// more records: the run goes on, and the file stays readable.
#include <cstdint>
#include <string>
#include <string_view>

namespace rankwise::monitor {

class RecordFile {
 public:
  // Takes `fd`: `path` open for writing at its end (its records whole).
  RecordFile(int fd, std::string path);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  // Writes `record` whole, or (once) cuts it off, warns and closes the file.
  void append(std::string_view record);
  // True until a write failed.
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;  // bytes of whole records
};

}  // namespace rankwise::monitor
