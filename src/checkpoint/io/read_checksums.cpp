#include "checkpoint/io/read_checksums.h"

#include <algorithm>
#include <chrono>

#include "util/crc32.h"

namespace rankwise::checkpoint::io {
namespace {

// Bytes read and checksummed at a time: what stays in a core's L2 cache
// between the read and the CRC (measured on the 2-core VM, issue 16).
constexpr std::size_t kPiece = std::size_t{1} << 20;

// How long the worker polls for the next large read before it sleeps, and
// the reader for the worker's last piece: a 1 MiB read from the page cache
// takes ~0.1 ms, and a sleep and wake-up per read cost more than that.
constexpr auto kSpin = std::chrono::microseconds(500);

// Polls `ready` until it holds or kSpin has passed; whether it holds.
template <class Ready>
bool spin_until(Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
  }
}

}  // namespace

ReadChecksums::ReadChecksums(ReadAt read_at, uint64_t end)
    : read_at_(std::move(read_at)), end_(end), worker_([this] { work(); }) {
  // Room for every piece and a few thousand small reads, taken once: growing
  // it between the tensors' allocations would fragment the heap they reuse.
  done_.reserve(static_cast<std::size_t>(end / kPiece) + 4096);
}

void ReadChecksums::reserve_more(std::size_t n) {
  // Doubling: reserving one more at a time would copy the whole list on every read
  // past the first reservation (quadratic in a checkpoint of many small tensors).
  if (done_.size() + n > done_.capacity()) done_.reserve(std::max(done_.size() + n, 2 * done_.capacity()));
}

void ReadChecksums::record(uint64_t offset, const char* data, std::size_t n) {
  if (offset >= end_ || n == 0) return;
  const std::size_t inside = static_cast<std::size_t>(std::min<uint64_t>(n, end_ - offset));
  done_.push_back({offset, inside, util::crc32_update(0, data, inside)});  // capacity reserved by the caller
}

ReadChecksums::~ReadChecksums() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_worker_.notify_one();
  worker_.join();
}

void ReadChecksums::take_pieces(uint64_t generation) {
  for (;;) {
    Job job;
    std::size_t at = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation_.load(std::memory_order_relaxed) != generation || next_piece_ >= job_.pieces) return;
      job = job_;
      at = next_piece_++ * kPiece;
    }
    const std::size_t size = std::min(kPiece, job.size - at);
    std::exception_ptr error;
    try {
      read_at_(job.bytes + at, size, job.offset + at);
    } catch (...) {
      error = std::current_exception();
    }
    // Nothing below throws (done_'s capacity was reserved with the job): every
    // piece taken is counted, or read() would return while it is in use.
    std::lock_guard<std::mutex> lock(mutex_);
    if (error) {
      if (!error_) error_ = error;
    } else {
      record(job.offset + at, job.bytes + at, size);
    }
    finished_pieces_.fetch_add(1, std::memory_order_release);
    if (reader_sleeping_) wake_reader_.notify_one();
  }
}

void ReadChecksums::work() {
  uint64_t seen = 0;
  for (;;) {
    const auto has_job = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(has_job)) {
      std::unique_lock<std::mutex> lock(mutex_);
      worker_sleeping_ = true;
      wake_worker_.wait(lock, [&] { return stop_ || has_job(); });
      worker_sleeping_ = false;
      if (!has_job()) return;  // stop_
    }
    seen = generation_.load(std::memory_order_acquire);
    take_pieces(seen);
  }
}

void ReadChecksums::read(void* buffer, std::size_t n, uint64_t offset) {
  char* bytes = static_cast<char*>(buffer);
  if (n < 2 * kPiece) {  // small reads (headers, the pickle): sharing them costs more than it saves
    read_at_(bytes, n, offset);
    std::lock_guard<std::mutex> lock(mutex_);
    reserve_more(1);
    record(offset, bytes, n);
    return;
  }
  uint64_t generation = 0;
  std::size_t pieces = (n + kPiece - 1) / kPiece;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reserve_more(pieces);  // may throw: before any piece is taken
    job_ = {bytes, n, offset, pieces};
    next_piece_ = 0;
    finished_pieces_.store(0, std::memory_order_relaxed);
    generation = generation_.fetch_add(1, std::memory_order_release) + 1;
    if (worker_sleeping_) wake_worker_.notify_one();
  }
  take_pieces(generation);
  // Every piece must be done before this returns (or throws): the buffer may be freed then.
  const auto all_done = [&] { return finished_pieces_.load(std::memory_order_acquire) == pieces; };
  const bool done_spinning = spin_until(all_done);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_spinning) {  // a slow read (a cold disk): sleep rather than burn the other core
    reader_sleeping_ = true;
    wake_reader_.wait(lock, all_done);
    reader_sleeping_ = false;
  }
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

ReadChecksums::Assembled ReadChecksums::crc() {
  std::vector<Span> spans;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    spans = done_;
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.size > b.size;
  });
  Assembled out;
  std::vector<char> buffer;
  uint64_t cursor = 0;
  auto add_unread = [&](uint64_t until) {  // [cursor, until), read now
    while (cursor < until) {
      const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(kPiece, until - cursor));
      buffer.resize(std::max(buffer.size(), n));
      read_at_(buffer.data(), n, cursor);
      out.crc = util::crc32_combine_lengths(out.crc, util::crc32_update(0, buffer.data(), n), n);
      cursor += n;
    }
  };
  const Span* counted = nullptr;  // the last span counted
  for (const Span& s : spans) {
    if (counted != nullptr && s.offset == counted->offset && s.size == counted->size) {
      out.consistent = out.consistent && s.crc == counted->crc;  // the same bytes read twice
      continue;
    }
    // A span that overlaps bytes already counted is left out: its other bytes are read again.
    if (s.offset < cursor) continue;
    add_unread(s.offset);
    out.crc = util::crc32_combine_lengths(out.crc, s.crc, s.size);
    cursor = s.offset + s.size;
    counted = &s;
  }
  add_unread(end_);
  return out;
}

}  // namespace rankwise::checkpoint::io
