#include "launch/output/output_merger.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "launch/output/console_streams.h"

namespace rankwise::launch::output {

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
  if (stream == Stream::kStdout) track_rewritten(worker);
  flush();
}

bool OutputMerger::shows_in_place(std::size_t worker) const {
  return options_.terminal && !options_.group_by_rank && (options_.console[worker] & kStdoutBit) != 0;
}

void OutputMerger::track_rewritten(std::size_t worker) {
  if (!shows_in_place(worker)) return;
  const std::string_view line = assemblers_[2 * worker].rewritten_line();
  if (line.empty()) {
    if (in_place_worker_ == worker && !in_place_.empty()) {  // its line ended (or was emptied)
      in_place_.clear();
      in_place_changed_ = true;
    }
    return;
  }
  std::string shown = options_.tags[worker];
  shown += line;
  if (in_place_worker_ == worker && shown == in_place_) return;
  in_place_ = std::move(shown);
  in_place_worker_ = worker;
  in_place_changed_ = true;
}

void OutputMerger::on_eof(std::size_t worker, Stream stream) {
  assemblers_[2 * worker + static_cast<int>(stream)].finish(
      [&](std::string_view line, bool continued) { emit(worker, stream, line, continued); });
  if (stream == Stream::kStdout) track_rewritten(worker);
  flush();
}

void OutputMerger::flush() {
  const bool lines = !pending_[0].empty() || !pending_[1].empty();
  if (!lines && !in_place_changed_) return;
  // "\r" + ESC[K: back to the start of the in-place line and clear it, so
  // whole lines print over it and it is redrawn below them.
  static constexpr std::string_view kClearLine = "\r\x1b[K";
  if (in_place_shown_ && !lines) {
    write_all(options_.stdout_fd, std::string(kClearLine) + in_place_);
    in_place_shown_ = !in_place_.empty();
    in_place_changed_ = false;
    return;
  }
  if (in_place_shown_) pending_[0].insert(0, kClearLine);
  for (int s = 0; s < 2; ++s) {
    if (pending_[s].empty()) continue;
    write_all(s == 0 ? options_.stdout_fd : options_.stderr_fd, pending_[s]);
    pending_[s].clear();
  }
  if (!in_place_.empty()) write_all(options_.stdout_fd, in_place_);
  in_place_shown_ = !in_place_.empty();
  in_place_changed_ = false;
}

void OutputMerger::write_own(int fd, std::string_view text) {
  flush();
  if (in_place_shown_) write_all(options_.stdout_fd, "\r\x1b[K");
  write_all(fd, text);
  if (in_place_shown_) write_all(options_.stdout_fd, in_place_);
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

}  // namespace rankwise::launch::output
