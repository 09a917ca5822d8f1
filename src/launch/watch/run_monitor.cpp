#include "launch/watch/run_monitor.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "wire/hang_diagnosis.h"
#include "launch/watch/monitor_table.h"
#include "launch/output/output_merger.h"

namespace rankwise::launch::watch {

namespace {

std::string who(const RankView& v) {
  if (!v.progress || v.progress->host.empty()) return fmt::format("rank {}", v.rank);
  return fmt::format("rank {} (host {}, pid {})", v.rank, v.progress->host, v.progress->pid);
}

// ESC 7 / ESC 8: save and restore the cursor (DEC; xterm, tmux, screen, VTE).
constexpr const char* kSaveCursor = "\x1b" "7";
constexpr const char* kRestoreCursor = "\x1b" "8";

}  // namespace

RunMonitor::RunMonitor(MonitorOptions options, Clock::time_point start)
    : options_(options),
      start_(start),
      next_table_(start),
      stragglers_(options.straggler_threshold, options.straggler_window) {
  if (options_.refresh.count() <= 0) {
    options_.refresh = options_.terminal ? kTerminalRefresh : kPlainRefresh;
  }
  next_table_ = start + (options_.terminal ? std::chrono::milliseconds(0) : options_.refresh);
}

RunMonitor::~RunMonitor() { finish(); }

void RunMonitor::observe(std::vector<RankView> views, Clock::time_point now) {
  heartbeats_.observe(progress_of(views), now);
  stalled_since_.resize(views.size());
  std::string lines;
  std::vector<RankCompute> computes;
  for (RankView& v : views) {
    v.heartbeat_stale = heartbeats_.stale(v.rank, now);
    const RankActivity a = activity_of(v);
    auto& since = stalled_since_[static_cast<std::size_t>(v.rank)];
    if (a == RankActivity::kStopped && !since) {
      since = now;
      const auto age = heartbeats_.age(v.rank, now);
      lines += fmt::format(
          "rankwise-run: stalled: {}: {}\n", who(v),
          v.stopped ? std::string("its process is stopped (SIGSTOP or a debugger)")
                    : fmt::format("heartbeat stopped {:.1f} s ago (process stopped, e.g. SIGSTOP, "
                                  "or unresponsive)",
                                  age ? age->count() / 1000.0 : 0.0));
    } else if (a != RankActivity::kStopped && since) {
      if (a != RankActivity::kEnded) {
        lines += fmt::format("rankwise-run: stalled: rank {} is running again after {:.0f} s\n",
                             v.rank, std::chrono::duration<double>(now - *since).count());
      }
      since.reset();
    }
    RankCompute c;
    c.rank = v.rank;
    if (v.progress) c.host = v.progress->host;
    const bool running = a == RankActivity::kWorking || a == RankActivity::kInCollective;
    if (running && v.progress && v.progress->step >= 0 && v.progress->step_ms > 0) {
      c.compute_ms = std::max(0.0, v.progress->step_ms - v.progress->wait_ms);
    }
    computes.push_back(std::move(c));
  }
  for (const StragglerEvent& e : stragglers_.observe(computes, now)) {
    lines += format_straggler_event(e);
  }
  if (!lines.empty()) write(lines);
  last_ = views;
  last_time_ = now;
  if (now >= next_table_) {
    next_table_ = now + options_.refresh;
    draw(table(views, now));
  }
}

std::vector<std::string> RunMonitor::table(const std::vector<RankView>& views,
                                           Clock::time_point now) const {
  std::vector<MonitorRow> rows;
  for (const RankView& v : views) {
    MonitorRow row;
    row.rank = v.rank;
    if (const auto& p = v.progress) {
      row.host = p->host;
      row.device = p->device;
      row.step = p->step;
      row.samples_per_s = p->samples_per_s;
      row.step_ms = p->step_ms;
      row.wait_ms = p->wait_ms;
      row.loss = p->loss;
      row.rss_bytes = p->rss_bytes;
    }
    row.heartbeat_age = heartbeats_.age(v.rank, now);
    switch (activity_of(v)) {
      case RankActivity::kEnded: row.state = "ended"; break;
      case RankActivity::kStopped: row.state = "stalled"; break;
      case RankActivity::kInCollective:
      case RankActivity::kWorking:
        row.state = !v.progress ? "starting" : stragglers_.flagged(v.rank) ? "straggler" : "running";
        break;
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::string> lines{fmt::format(
      "rankwise-run: monitor at {:.0f} s (straggler: compute > {:g} % over the median for {:g} s; "
      "stalled: no heartbeat for {:g} s)",
      std::chrono::duration<double>(now - start_).count(), options_.straggler_threshold * 100,
      options_.straggler_window.count() / 1000.0, wire::kStaleHeartbeatMs / 1000.0)};
  for (std::string& line : format_monitor_table(rows)) {
    lines.push_back(fmt::format("rankwise-run:   {}", line));
  }
  return lines;
}

void RunMonitor::write(std::string_view text) const {
  if (options_.write) {
    options_.write(options_.fd, text);
  } else {
    output::write_all(options_.fd, text);
  }
}

void RunMonitor::draw(const std::vector<std::string>& lines) {
  const int n = static_cast<int>(lines.size());
  winsize ws{};
  const bool sized = options_.terminal && ::ioctl(options_.fd, TIOCGWINSZ, &ws) == 0 &&
                     ws.ws_row >= n + 3 && ws.ws_col >= 20;
  if (!sized) {  // plain lines (and on a terminal too small for the table)
    release_terminal();
    std::string out;
    for (const std::string& line : lines) out += fmt::format("{}\n", line);
    write(out);
    return;
  }
  const int height = ws.ws_row;
  std::string out;
  if (reserved_ != n || height_ != height) {
    release_terminal();
    // Make room below the cursor, take the bottom n lines out of the
    // scrolling region (which homes the cursor: save and restore it), and
    // go back up to where the output was.
    out += std::string(static_cast<std::size_t>(n), '\n');
    out += kSaveCursor;
    out += fmt::format("\x1b[1;{}r", height - n);
    out += kRestoreCursor;
    out += fmt::format("\x1b[{}A", n);
    reserved_ = n;
    height_ = height;
  }
  out += kSaveCursor;
  for (int i = 0; i < n; ++i) {
    std::string line = lines[static_cast<std::size_t>(i)];
    if (line.size() >= ws.ws_col) line.resize(ws.ws_col - 1u);  // never wrap
    out += fmt::format("\x1b[{};1H\x1b[2K{}", height - n + 1 + i, line);
  }
  out += kRestoreCursor;
  output::write_all(options_.fd, out);
}

void RunMonitor::release_terminal() {
  if (reserved_ == 0) return;
  // The whole screen scrolls again (resetting the region homes the cursor:
  // save and restore it), and the table's old lines are cleared.
  output::write_all(options_.fd, fmt::format("{}\x1b[r{}{}\x1b[{};1H\x1b[J{}", kSaveCursor, kRestoreCursor,
                                     kSaveCursor, height_ - reserved_ + 1, kRestoreCursor));
  reserved_ = 0;
}

void RunMonitor::finish(const std::vector<RankView>* views, std::optional<Clock::time_point> now) {
  if (finished_) return;
  finished_ = true;
  release_terminal();
  if (views != nullptr && now) {
    std::vector<RankView> final_views = *views;
    heartbeats_.observe(progress_of(final_views), *now);
    for (RankView& v : final_views) v.heartbeat_stale = heartbeats_.stale(v.rank, *now);
    last_ = std::move(final_views);
    last_time_ = *now;
  }
  if (last_.empty()) return;
  std::string out;
  for (const std::string& line : table(last_, last_time_)) out += fmt::format("{}\n", line);
  output::write_all(options_.fd, out);
}

}  // namespace rankwise::launch::watch
