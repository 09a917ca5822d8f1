#include "checkpoint/detail/read_checksums.h"

#include <algorithm>
#include <chrono>

#include "detail/crc32.h"

namespace rankwise::detail {
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

ReadChecksums::ReadChecksums(ReadAt read_at)
    : read_at_(std::move(read_at)), worker_([this] { work(); }) {}

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
    uint32_t crc = 0;
    try {
      read_at_(job.bytes + at, size, job.offset + at);
      crc = crc32_update(0, job.bytes + at, size);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error) {
      if (!error_) error_ = error;
    } else {
      done_.push_back({job.offset + at, size, crc});
    }
    finished_pieces_.fetch_add(1, std::memory_order_release);
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
    const uint32_t crc = crc32_update(0, bytes, n);
    std::lock_guard<std::mutex> lock(mutex_);
    done_.push_back({offset, n, crc});
    return;
  }
  uint64_t generation = 0;
  std::size_t pieces = (n + kPiece - 1) / kPiece;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = {bytes, n, offset, pieces};
    next_piece_ = 0;
    finished_pieces_.store(0, std::memory_order_relaxed);
    generation = generation_.fetch_add(1, std::memory_order_release) + 1;
    if (worker_sleeping_) wake_worker_.notify_one();
  }
  take_pieces(generation);
  // Every piece must be done before this returns (or throws): the buffer may be freed then.
  const auto all_done = [&] { return finished_pieces_.load(std::memory_order_acquire) == pieces; };
  while (!spin_until(all_done)) std::this_thread::yield();
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

uint32_t ReadChecksums::crc_of_prefix(uint64_t end) {
  std::vector<Span> spans;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    spans = done_;
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.size > b.size;
  });
  std::vector<char> buffer;
  uint32_t crc = 0;
  uint64_t cursor = 0;
  auto add_unread = [&](uint64_t until) {  // [cursor, until), read now
    while (cursor < until) {
      const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(kPiece, until - cursor));
      buffer.resize(std::max(buffer.size(), n));
      read_at_(buffer.data(), n, cursor);
      crc = crc32_combine_lengths(crc, crc32_update(0, buffer.data(), n), n);
      cursor += n;
    }
  };
  for (const Span& s : spans) {
    // A span that overlaps bytes already counted, or runs past `end`, is
    // left out: its bytes are covered by the others or read again.
    if (s.size == 0 || s.offset < cursor || s.offset + s.size > end) continue;
    add_unread(s.offset);
    crc = crc32_combine_lengths(crc, s.crc, s.size);
    cursor = s.offset + s.size;
  }
  add_unread(end);
  return crc;
}

}  // namespace rankwise::detail
