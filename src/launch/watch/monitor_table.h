#pragma once
/// \file monitor_table.h
/// The per-rank table of rankwise-run --monitor, as text: one row per rank
/// from its heartbeat (wire/collective_progress.h) and what the launcher
/// concluded about it (state, heartbeat age).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rankwise::launch::watch {

/// One rank's row.
struct MonitorRow {
  int rank = 0;
  std::string host;    ///< "" unknown
  std::string device;  ///< "" unknown
  int64_t step = -1;   ///< -1: no step recorded (monitor::record_step never called)
  double samples_per_s = 0;
  double step_ms = 0;  ///< per step; 0: not measured yet
  double wait_ms = 0;  ///< of step_ms, a collective in flight
  std::optional<double> loss;
  int64_t rss_bytes = 0;  ///< 0: unknown
  std::optional<std::chrono::milliseconds> heartbeat_age;  ///< nullopt: no heartbeat yet
  std::string state;  ///< "running", "straggler", "stalled", "ended", ...
};

/// The table's lines, without newlines: a header, then one line per row,
/// columns aligned: rank, host, device, step, samples/s, compute ms (per
/// step: step_ms - wait_ms), wait ms (per step), loss, rss, heartbeat (age),
/// state; "-" where a value is unknown.
std::vector<std::string> format_monitor_table(const std::vector<MonitorRow>& rows);

}  // namespace rankwise::launch::watch
