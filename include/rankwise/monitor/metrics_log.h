#pragma once
/// \file metrics_log.h
/// The metrics log of a run: JSON Lines (a config record, then step and epoch records) that
/// `rankwise-report` draws. Every rank constructs it and calls its methods; only rank 0
/// writes, each record a whole line or none. It never communicates: pass values
/// already reduced over ranks, computed on every rank.
/// See docs/monitoring.md#the-metrics-log.

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "rankwise/monitor/rank_stats.h"

namespace rankwise::monitor {

/// Named values of one record, kept in this order (e.g. {{"loss", 0.61}}).
/// Non-finite values are written as JSON null.
using MetricValues = std::vector<std::pair<std::string, double>>;
/// A configuration value: a flag, an integer, a real or a text.
using ConfigValue = std::variant<bool, int64_t, double, std::string>;
/// The run's configuration (options, hyper-parameters), in this order.
using RunConfig = std::vector<std::pair<std::string, ConfigValue>>;

/// One record of the log (kind "step" or "epoch").
struct LogRecord {
  std::string kind = "step";             ///< "step" or "epoch"
  int64_t step = 0;                      ///< steps (training batches) so far
  int64_t epoch = 0;                     ///< the epoch, numbered as the program prints it
  MetricValues metrics;                  ///< reduced values
  std::optional<double> samples_per_s;   ///< global throughput (samples/s), when known
  std::vector<RankStats> ranks;          ///< per-rank statistics, when known (else no field)
};

/// Options of MetricsLog.
///
/// Example: `MetricsLogOptions("ckpts/metrics.jsonl").append(true).csv_path("ckpts/metrics.csv")`
struct MetricsLogOptions {
  explicit MetricsLogOptions(std::string path) : path_(std::move(path)) {}
  /// The JSON Lines file rank 0 writes. Its directory must exist. Empty: no
  /// log (every call is a no-op), e.g. for a run without a directory.
  TORCH_ARG(std::string, path);
  /// Append to an existing log (a resumed run: a new config record starts a
  /// new segment); default false: an existing file is replaced.
  TORCH_ARG(bool, append) = false;
  /// Also write CSV here ("" (default): none), in long form, one row per
  /// value: `kind,step,epoch,time,name,value` (the config record's rows have
  /// empty step and epoch; `samples_per_s` is a row of its own).
  TORCH_ARG(std::string, csv_path) = "";
  /// Also write every step and epoch record as TensorBoard scalars, live, to a new event file
  /// in this directory (created if missing; TensorBoardWriter); "" (default): none. Tags are
  /// rankwise-report --tensorboard's (`loss`, `epoch/<name>`, `rank<r>/wait_ms`, ...); one
  /// event per record at its step; non-finite values left out. See docs/monitoring.md.
  TORCH_ARG(std::string, tensorboard_dir) = "";
};

/// The metrics log (see the file comment).
class MetricsLog {
 public:
  /// Local (every rank constructs it). On rank 0: opens (creates, replaces or appends to) the
  /// files and writes the config record (`config`, world size, rankwise version, UTC start).
  /// Throws ConfigError on rank 0 when a file, the TensorBoard directory or its event file
  /// cannot be created (naming it and the system's reason).
  explicit MetricsLog(MetricsLogOptions options, const RunConfig& config = {});
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /// Appends `record` (rank 0; a no-op elsewhere), and its scalars to the
  /// TensorBoard file when there is one. Local. A file whose write fails
  /// (disk full, `ulimit -f`) loses the torn record, warns once on stderr
  /// naming itself and the reason, and takes no more; training goes on.
  void write(const LogRecord& record);
  /// write() of a "step" record.
  void log_step(int64_t step, int64_t epoch, const MetricValues& metrics,
                std::optional<double> samples_per_s = std::nullopt,
                std::vector<RankStats> ranks = {});
  /// write() of an "epoch" record: `epoch` ended at `step`.
  void log_epoch(int64_t epoch, int64_t step, const MetricValues& metrics,
                 std::optional<double> samples_per_s = std::nullopt);

  /// True on the rank that writes (rank 0, with a path).
  bool writing() const;
  /// The JSON Lines path.
  const std::string& path() const;
  /// Seconds since the log was opened (the `time` of a record written now).
  double elapsed_seconds() const;

 private:
  struct Files;
  MetricsLogOptions options_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<Files> files_;  // null on ranks other than 0
};

/// The JSON line of `record` written `time` seconds after the start, without
/// its newline (what MetricsLog::write appends). Any rank, no communication.
std::string format_record(const LogRecord& record, double time);

}  // namespace rankwise::monitor
