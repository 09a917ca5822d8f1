#include "checkpoint/detail/read_checksums.h"

#include <algorithm>
#include <chrono>

#include "detail/crc32.h"

namespace rankwise::detail {
namespace {

// Bytes read and checksummed at a time: what stays in a core's L2 cache
// between the read and the CRC (measured on the 2-core VM, issue 16).
constexpr std::size_t kPiece = std::size_t{1} << 20;

// How long the worker, and the reader waiting for the last piece, poll
// before they sleep: a 1 MiB read from the page cache takes ~0.1 ms, and a
// sleep and wake-up per piece cost ~10% of a load (measured, issue 16).
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

void ReadChecksums::work() {
  for (;;) {
    spin_until([&] { return queued_.load(std::memory_order_acquire) > 0; });
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.empty()) {
      worker_sleeping_ = true;
      wake_worker_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      worker_sleeping_ = false;
      if (queue_.empty()) return;  // stop_, and nothing left
    }
    Span span = queue_.front();
    lock.unlock();
    span.crc = crc32_update(0, span.data, span.size);
    span.data = nullptr;
    lock.lock();
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    done_.push_back(span);
    if (queue_.empty() && reader_sleeping_) wake_reader_.notify_one();
  }
}

void ReadChecksums::wait_until_checksummed() {
  if (spin_until([&] { return queued_.load(std::memory_order_acquire) == 0; })) {
    std::lock_guard<std::mutex> lock(mutex_);  // orders done_ after the worker's last push
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  reader_sleeping_ = true;
  wake_reader_.wait(lock, [&] { return queue_.empty(); });
  reader_sleeping_ = false;
}

void ReadChecksums::read(void* buffer, std::size_t n, uint64_t offset) {
  char* bytes = static_cast<char*>(buffer);
  if (n < kPiece) {  // small reads (headers, the pickle): a hand-off costs more than the CRC
    read_at_(bytes, n, offset);
    const uint32_t crc = crc32_update(0, bytes, n);
    std::lock_guard<std::mutex> lock(mutex_);
    done_.push_back({offset, n, crc, nullptr});
    return;
  }
  // Queued pieces must be checksummed before this returns (or throws): the
  // buffer may be freed then.
  struct Drain {
    ReadChecksums& self;
    ~Drain() { self.wait_until_checksummed(); }
  } drain{*this};
  for (std::size_t at = 0; at < n; at += kPiece) {
    const std::size_t size = std::min(kPiece, n - at);
    read_at_(bytes + at, size, offset + at);
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({offset + at, size, 0, bytes + at});
    queued_.fetch_add(1, std::memory_order_release);
    if (worker_sleeping_) wake_worker_.notify_one();
  }
}

uint32_t ReadChecksums::crc_of_prefix(uint64_t end) {
  wait_until_checksummed();
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
