#pragma once
/// The CRC-32 of a file assembled from the reads a parser made of it, so
/// that verifying a checkpoint costs no second pass over its bytes, and the
/// bytes verified are the very bytes returned: each read is done 1 MiB at a
/// time and every piece is checksummed by a worker thread right after it
/// lands, while it is still in the cache; bytes the parser never read (zip
/// headers it skipped, unreferenced records) are read and checksummed at
/// the end; the pieces are combined in file order with crc32_combine.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rankwise::detail {

/// Reads `n` bytes at `offset` into `buffer`, exactly, or throws.
using ReadAt = std::function<void(void* buffer, std::size_t n, uint64_t offset)>;

class ReadChecksums {
 public:
  explicit ReadChecksums(ReadAt read_at);
  ReadChecksums(const ReadChecksums&) = delete;
  ReadChecksums& operator=(const ReadChecksums&) = delete;
  ~ReadChecksums();

  /// read_at(buffer, n, offset), checksummed. Returns once every piece is
  /// checksummed, so no pointer into `buffer` is kept after it returns.
  /// Throws what read_at throws. Called from one thread at a time.
  void read(void* buffer, std::size_t n, uint64_t offset);

  /// The CRC-32 (zlib's crc32) of the file's bytes [0, end): the reads
  /// inside it combined, the bytes between them read now.
  uint32_t crc_of_prefix(uint64_t end);

 private:
  struct Span {
    uint64_t offset = 0;
    std::size_t size = 0;
    uint32_t crc = 0;
    const char* data = nullptr;  // while queued
  };
  void work();
  // Returns once every queued piece is checksummed.
  void wait_until_checksummed();

  ReadAt read_at_;
  std::vector<Span> done_;  // checksummed reads, in the order they finished
  std::deque<Span> queue_;
  std::mutex mutex_;
  std::condition_variable wake_worker_, wake_reader_;
  std::atomic<int> queued_{0};  // pieces queued, polled before sleeping
  bool stop_ = false;
  bool worker_sleeping_ = false, reader_sleeping_ = false;
  std::thread worker_;
};

}  // namespace rankwise::detail
