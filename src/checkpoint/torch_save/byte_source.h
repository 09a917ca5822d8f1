#pragma once
// Where a checkpoint file's bytes are read from (checkpoint_file.cpp): an
// open file, read with pread and checksummed on two threads, or memory
// (bytes received from another rank). Errors are CheckpointError naming the
// path.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <unistd.h>

namespace rankwise::checkpoint::torch_save {

// An open file, closed on scope exit.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Exactly `size` bytes of `fd` at `offset`, or CheckpointError naming `path`.
void read_exactly(int fd, void* buffer, std::size_t size, uint64_t offset, const std::string& path);

// CRC-32 of the file's first `end` bytes, its two halves read on two threads.
uint32_t crc_of_file_prefix(int fd, uint64_t end, const std::string& path);

class ByteSource {
 public:
  ByteSource(std::string path, uint64_t size) : path_(std::move(path)), size_(size) {}
  virtual ~ByteSource() = default;
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Exactly `n` bytes at `offset`, or CheckpointError naming the path.
  virtual void read(void* buffer, std::size_t n, uint64_t offset) const = 0;
  // CRC-32 of [0, end), as one pass on its own.
  virtual uint32_t crc_of_prefix(uint64_t end) const = 0;

 private:
  std::string path_;
  uint64_t size_;
};

// An open file of `size` bytes (the descriptor stays the caller's).
class FileSource : public ByteSource {
 public:
  FileSource(const std::string& path, int fd, uint64_t size) : ByteSource(path, size), fd_(fd) {}
  void read(void* buffer, std::size_t n, uint64_t offset) const override {
    read_exactly(fd_, buffer, n, offset, path());
  }
  uint32_t crc_of_prefix(uint64_t end) const override { return crc_of_file_prefix(fd_, end, path()); }

 private:
  int fd_;
};

// `bytes` (kept by reference: they must outlive the source), named `path`.
class MemorySource : public ByteSource {
 public:
  MemorySource(const std::string& path, const std::string& bytes) : ByteSource(path, bytes.size()), bytes_(bytes) {}
  void read(void* buffer, std::size_t n, uint64_t offset) const override;
  uint32_t crc_of_prefix(uint64_t end) const override;

 private:
  const std::string& bytes_;
};

}  // namespace rankwise::checkpoint::torch_save
