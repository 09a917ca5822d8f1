#pragma once
/// \file run_monitor.h
/// rankwise-run --monitor: from every rank's heartbeat in the store (read by
/// the CollectiveProgressReader the hang check also uses) and what the launcher sees of
/// its own workers, a per-rank table (monitor_table.h) and one line when a
/// rank starts or stops being a straggler (straggler_detector.h) or stalled
/// (its heartbeat stopped for detail::kStaleHeartbeatMs, or its process is
/// stopped).
///
/// Everything goes to one stream of the launcher (stderr), written by the
/// launcher's main thread between the merged worker lines, so no line is
/// torn. On a terminal the table stays in the bottom lines of the screen,
/// redrawn in place: those lines are taken out of the scrolling region
/// (DECSTBM), so the workers' lines scroll above it untouched, and the
/// region is given back when the attempt ends, where the last table is
/// printed once. Otherwise (a file, a pipe: CI logs) the table is printed as
/// plain lines every refresh interval, and once at the end.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/watch/hang_watchdog.h"
#include "launch/watch/heartbeat_ages.h"
#include "launch/watch/straggler_detector.h"

namespace rankwise::launch::watch {

/// How the monitor shows what it sees.
struct MonitorOptions {
  int fd = 2;  ///< where it writes
  /// How its lines (stragglers, stalls, plain tables) are written to `fd`:
  /// the launcher passes OutputMerger::write_own, so that they never land on
  /// a worker's in-place progress line; default write_all.
  std::function<void(int, std::string_view)> write;
  /// Whether `fd` is a terminal (in-place table); the launcher passes isatty(fd).
  bool terminal = false;
  /// Time between tables; 0: kTerminalRefresh on a terminal, kPlainRefresh otherwise.
  std::chrono::milliseconds refresh{0};
  double straggler_threshold = kDefaultStragglerThreshold;
  std::chrono::milliseconds straggler_window = kDefaultStragglerWindow;
};

constexpr std::chrono::milliseconds kTerminalRefresh{1000};
constexpr std::chrono::milliseconds kPlainRefresh{30000};

class RunMonitor {
 public:
  using Clock = std::chrono::steady_clock;

  RunMonitor(MonitorOptions options, Clock::time_point start);
  /// finish()
  ~RunMonitor();
  RunMonitor(const RunMonitor&) = delete;
  RunMonitor& operator=(const RunMonitor&) = delete;

  /// One observation of every rank (index = rank) at steady time `now`:
  /// prints the straggler and stall lines it causes, and the table when due.
  void observe(std::vector<RankView> views, Clock::time_point now);

  /// Whether observe() at `now` prints the table: the caller then gives it
  /// a read of the store that began no earlier than now.
  bool table_due(Clock::time_point now) const { return now >= next_table_; }

  /// The attempt ended: gives the terminal's lines back and prints the last
  /// table once, of `views` (every rank at the end) when given, else of the
  /// last observation. Only the first call does anything.
  void finish(const std::vector<RankView>* views = nullptr,
              std::optional<Clock::time_point> now = std::nullopt);

 private:
  std::vector<std::string> table(const std::vector<RankView>& views, Clock::time_point now) const;
  void draw(const std::vector<std::string>& lines);
  /// options_.write, or write_all.
  void write(std::string_view text) const;
  void release_terminal();

  MonitorOptions options_;
  Clock::time_point start_;
  Clock::time_point next_table_;
  HeartbeatAges heartbeats_;
  StragglerDetector stragglers_;
  std::vector<std::optional<Clock::time_point>> stalled_since_;  // index = rank
  std::vector<RankView> last_;  // the last observation, for finish()
  Clock::time_point last_time_;
  bool finished_ = false;
  // On a terminal: the reserved bottom lines (0: none yet) and the screen
  // height they were reserved for.
  int reserved_ = 0;
  int height_ = 0;
};

}  // namespace rankwise::launch::watch
