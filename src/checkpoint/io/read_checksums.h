#pragma once
/// The CRC-32 of a file assembled from the reads a parser made of it, so
/// that verifying a checkpoint costs no second pass over its bytes, and the
/// bytes verified are the very bytes returned. A large read is split into
/// 1 MiB pieces that two threads (the caller and a worker) read and
/// checksum, each piece right after it lands, while it is in that core's
/// cache; bytes the parser never read (zip headers it skipped, unreferenced
/// records) are read and checksummed at the end; the pieces are combined in
/// file order with crc32_combine.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rankwise::checkpoint::io {

/// Reads `n` bytes at `offset` into `buffer`, exactly, or throws. Called
/// from two threads at once (on disjoint buffers).
using ReadAt = std::function<void(void* buffer, std::size_t n, uint64_t offset)>;

class ReadChecksums {
 public:
  /// Checksums the bytes [0, end) of what `read_at` reads (a read's bytes
  /// from `end` on are not counted).
  ReadChecksums(ReadAt read_at, uint64_t end);
  ReadChecksums(const ReadChecksums&) = delete;
  ReadChecksums& operator=(const ReadChecksums&) = delete;
  ~ReadChecksums();

  /// read_at(buffer, n, offset), checksummed. Returns (or throws what
  /// read_at threw) once every piece is read and checksummed, so no pointer
  /// into `buffer` is kept after it returns. Called from one thread at a time.
  void read(void* buffer, std::size_t n, uint64_t offset);

  struct Assembled {
    uint32_t crc = 0;         ///< zlib's crc32 of [0, end)
    bool consistent = true;   ///< false when two reads of the same bytes differed (the file changed)
  };
  /// The CRC-32 of the file's bytes [0, end): the reads combined, the bytes
  /// between them read now. Where reads overlapped, one of them counts (a
  /// repeated read of the very same range is compared instead: `consistent`).
  Assembled crc();

 private:
  struct Span {
    uint64_t offset = 0;
    std::size_t size = 0;
    uint32_t crc = 0;
  };
  // The large read both threads take pieces of.
  struct Job {
    char* bytes = nullptr;
    std::size_t size = 0;
    uint64_t offset = 0;
    std::size_t pieces = 0;
  };
  void work();
  // Adds the CRC of the part of [offset, offset + n) below end_ to done_ (its capacity reserved); under mutex_.
  void record(uint64_t offset, const char* data, std::size_t n);
  // Makes room for `n` more spans in done_ (geometric growth); under mutex_. May throw.
  void reserve_more(std::size_t n);
  // Takes pieces of job `generation` until none is left (or another job began).
  void take_pieces(uint64_t generation);

  ReadAt read_at_;
  uint64_t end_;
  std::vector<Span> done_;  // checksummed reads (guarded by mutex_)
  Job job_;                    // guarded by mutex_
  std::size_t next_piece_ = 0;  // guarded by mutex_
  std::atomic<std::size_t> finished_pieces_{0};
  std::atomic<uint64_t> generation_{0};  // counts jobs (changed under mutex_); polled by the worker
  std::exception_ptr error_;             // the first failed piece's (guarded by mutex_)
  std::mutex mutex_;
  std::condition_variable wake_worker_, wake_reader_;
  bool stop_ = false, worker_sleeping_ = false, reader_sleeping_ = false;
  std::thread worker_;
};

}  // namespace rankwise::checkpoint::io
