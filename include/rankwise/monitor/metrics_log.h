#pragma once
/// \file metrics_log.h
/// The metrics log of a run: rank 0 appends one JSON object per line (JSON
/// Lines) for the run's configuration, each logged step and each epoch, and
/// `rankwise-report RUN.jsonl -o report.html` draws it.
///
/// \code
///   rankwise::monitor::MetricsLog log(rankwise::monitor::MetricsLogOptions("ckpts/metrics.jsonl"),
///                                     {{"program", "train"}, {"epochs", int64_t{10}}, {"lr", 0.02}});
///   ...
///   log.log_step(step, epoch, {{"loss", reduced_loss}}, samples_per_s);   // every rank calls
///   log.log_epoch(epoch, step, {{"test_accuracy", accuracy}});           // rank 0 writes
/// \endcode
///
/// Records (one line each, keys in this order; `time` is seconds since the
/// log was opened, from a steady clock):
///
///     {"kind":"config","version":1,"time":0.0,"started_at":"2026-12-03T17:00:00Z","world_size":2,
///      "rankwise":"0.1.0","config":{"program":"fashion_mnist","epochs":2,...}}
///     {"kind":"step","step":20,"epoch":1,"time":1.25,"metrics":{"loss":0.61},"samples_per_s":5120.0}
///     {"kind":"epoch","step":32,"epoch":1,"time":2.5,"metrics":{"test_accuracy":0.8134},"samples_per_s":4900.0}
///
/// `samples_per_s` is present only when given; a record may carry `ranks`:
/// `[{"rank":0,"samples_per_s":...,"wait_ms":...,"compute_ms":...}, ...]`.
/// A resumed run that appends (MetricsLogOptions::append) starts a new
/// segment with a new config record, whose `time` starts again at 0.
///
/// Every rank runs the whole program, so every rank constructs the log and
/// calls its methods; only rank 0 (rankwise::is_rank_zero()) opens and writes
/// the file, the others do nothing. The log never communicates: the values
/// passed in must already be reduced over ranks (MetricCollection::compute(),
/// Fabric::all_reduce), computed on every rank, outside any rank-0 branch.
/// Each record is one write(2) of a whole line, so a run killed at any point
/// leaves a log whose lines are all whole JSON (rankwise-report also skips a
/// torn last line).

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
  /// Also write every step and epoch record as TensorBoard scalars, live, to
  /// a new event file in this directory (created if missing) through a
  /// TensorBoardWriter (rankwise/monitor/tensorboard.h); "" (default): none.
  /// Tags are rankwise-report --tensorboard's, so the live file and an
  /// exported one agree: a step record's metrics by their names (`loss`),
  /// `samples_per_s`; an epoch record's as `epoch/<name>` (`epoch/test_accuracy`),
  /// `epoch/samples_per_s`; per-rank statistics as `rank<r>/samples_per_s`,
  /// `rank<r>/wait_ms`, `rank<r>/compute_ms`. Each record is one event at the
  /// record's step, its wall time the log's start plus the record's `time`.
  /// Non-finite values (JSON null in the log) are left out.
  TORCH_ARG(std::string, tensorboard_dir) = "";
};

/// The metrics log (see the file comment).
class MetricsLog {
 public:
  /// Local (no communication; every rank constructs it). On rank 0: opens
  /// (creates, replaces or appends to) the files and writes the config
  /// record: `config`, plus the world size (1 without a process group), the
  /// rankwise version and the UTC start time. Throws ConfigError on rank 0
  /// when a file cannot be opened (naming it and the system's reason); the
  /// launcher then stops the other ranks; likewise when the TensorBoard
  /// directory or its event file cannot be created (TensorBoardWriter).
  explicit MetricsLog(MetricsLogOptions options, const RunConfig& config = {});
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /// Appends `record` (rank 0; a no-op elsewhere), and its scalars to the
  /// TensorBoard file when there is one. Local. A write that fails (disk
  /// full) is not reported: the log never stops training.
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
