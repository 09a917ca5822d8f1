#include "launch/output_merger.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "launch/console_streams.h"

namespace rankwise {
namespace launch {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return;  // EPIPE or another error: output cannot go anywhere
    }
  }
}

OutputMerger::OutputMerger(MergerOptions options) : options_(std::move(options)) {
  const std::size_t n = options_.ranks.size();
  options_.tags.resize(n);
  options_.log_fds.resize(n, {-1, -1});
  options_.console.resize(n, kBothStreams);
  assemblers_.resize(2 * n);
  tails_.resize(n);
  held_.resize(n);
}

void OutputMerger::on_data(std::size_t worker, Stream stream, const char* data, std::size_t n) {
  const auto& fds = options_.log_fds[worker];
  const int log_fd = stream == Stream::kStdout ? fds.first : fds.second;
  if (log_fd >= 0) write_all(log_fd, std::string_view(data, n));
  assemblers_[2 * worker + static_cast<int>(stream)].feed(
      data, n, [&](std::string_view line, bool continued) { emit(worker, stream, line, continued); });
  flush();
}

void OutputMerger::on_eof(std::size_t worker, Stream stream) {
  assemblers_[2 * worker + static_cast<int>(stream)].finish(
      [&](std::string_view line, bool continued) { emit(worker, stream, line, continued); });
  flush();
}

void OutputMerger::flush() {
  for (int s = 0; s < 2; ++s) {
    if (pending_[s].empty()) continue;
    write_all(s == 0 ? options_.stdout_fd : options_.stderr_fd, pending_[s]);
    pending_[s].clear();
  }
}

void OutputMerger::emit(std::size_t worker, Stream stream, std::string_view line, bool continued) {
  if (stream == Stream::kStderr) {
    auto& tail = tails_[worker];
    tail.emplace_back(line);
    if (continued) tail.back() += kContinuationMarker;
    if (tail.size() > kTailLines) tail.pop_front();
  }
  const unsigned bit = stream == Stream::kStdout ? kStdoutBit : kStderrBit;
  if ((options_.console[worker] & bit) == 0) return;
  const std::string& tag = options_.tags[worker];
  std::string& text = options_.group_by_rank ? held_[worker].emplace_back(Held{stream, {}}).text
                                             : pending_[static_cast<int>(stream)];
  text += tag;
  text += line;
  if (continued) text += kContinuationMarker;
  text += '\n';
}

void OutputMerger::flush_groups() {
  std::vector<std::size_t> order(held_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return options_.ranks[a] < options_.ranks[b];
  });
  for (std::size_t w : order) {
    for (const Held& h : held_[w]) {
      write_all(h.stream == Stream::kStdout ? options_.stdout_fd : options_.stderr_fd, h.text);
    }
    held_[w].clear();
  }
}

}  // namespace launch
}  // namespace rankwise
