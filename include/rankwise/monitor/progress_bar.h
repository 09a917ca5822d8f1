#pragma once
/// \file progress_bar.h
/// Training progress on rank 0 (epoch, step/total, global samples/s, ETA, loss reduced
/// over ranks): a bar redrawn with '\r' on a terminal, plain lines in a pipe or log.
/// Collective: every rank calls start_epoch(), update() once per step and end_epoch(), the
/// same number of times; every every_n_steps-th update() all_gathers 5 float64 per rank
/// (decided by call count, never by clock). See docs/monitoring.md#the-progress-bar.

#include <torch/arg.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "rankwise/monitor/rank_stats.h"

namespace rankwise::monitor {

/// How ProgressBar shows itself on rank 0.
enum class ProgressBarStyle {
  kAuto,   ///< a bar on a terminal (stdout_is_terminal()), else lines
  kBar,    ///< a bar rewritten in place with '\r'
  kLines,  ///< a plain line at most every ProgressBarOptions::line_interval
  kOff,    ///< shows nothing; update() still reduces on schedule (same collectives)
};

/// Whether what this process writes to stdout ends on a terminal. Under
/// rankwise-run a worker's stdout is a pipe into the launcher, which sets
/// RANKWISE_STDOUT_IS_TTY to 1 when it shows that worker's stdout on a
/// terminal (and shows a line rewritten with '\r' in place there), else 0;
/// without that variable: isatty(stdout). Local (read with rankwise::get_env).
bool stdout_is_terminal();

/// Parses "auto", "bar", "lines" or "off" (e.g. for a --progress flag);
/// throws ConfigError naming the value and the choices otherwise.
ProgressBarStyle parse_progress_style(const std::string& text);

/// Options of ProgressBar.
///
/// Example: `ProgressBarOptions().every_n_steps(50).line_interval(std::chrono::seconds(30))`
struct ProgressBarOptions {
  /// Reduce over ranks (and redraw) every N calls of update(); at least 1.
  TORCH_ARG(int64_t, every_n_steps) = 20;
  /// Plain lines: at most one per interval (rank 0's clock; the first
  /// reduction of a run always prints). 0: a line at every reduction.
  TORCH_ARG(std::chrono::milliseconds, line_interval) = std::chrono::seconds(10);
  /// Bar or lines (see ProgressBarStyle).
  TORCH_ARG(ProgressBarStyle, style) = ProgressBarStyle::kAuto;
  /// Characters of the bar itself; at least 1.
  TORCH_ARG(int64_t, bar_width) = 24;
};

/// Rank-0 training progress with values reduced over ranks (see the file
/// comment for which calls are collective).
class ProgressBar {
 public:
  /// Local. Throws ConfigError for every_n_steps or bar_width below 1 or a
  /// negative line_interval.
  explicit ProgressBar(ProgressBarOptions options = {});
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Local. Starts epoch `epoch` (numbered as printed, e.g. 1-based) of
  /// `total_epochs`, of `steps` steps per rank, `first_step` of them done
  /// already (a resumed epoch). Throws ConfigError when steps < 0 or
  /// first_step is outside [0, steps].
  void start_epoch(int64_t epoch, int64_t total_epochs, int64_t steps, int64_t first_step = 0);
  /// One step done on this rank: `samples` real samples (padding not counted) and their mean
  /// `loss` (scalar tensor on any device; undefined: no loss). Collective on every
  /// every_n_steps-th call (one all_gather), local otherwise. Returns true when this call
  /// reduced (the same on every rank): loss() and samples_per_second() are then new.
  bool update(int64_t samples, const torch::Tensor& loss = {}, std::source_location site = std::source_location::current());
  /// Collective (every rank): reduces the steps since the last reduction
  /// (if any; the count decides, identically everywhere) and shows the
  /// epoch's final state; ends the bar's line. Returns true when it reduced.
  bool end_epoch(std::source_location site = std::source_location::current());

  /// The last reduced values (same on every rank): samples per second over
  /// all ranks between the last two reductions (rank 0's clock), and the
  /// sample-weighted mean loss over all ranks since the one before. NaN before
  /// the first reduction.
  double samples_per_second() const { return samples_per_second_; }
  double loss() const { return loss_; }
  /// Samples per second over all ranks since start_epoch(), up to the last
  /// reduction (rank 0's clock; the same on every rank): after end_epoch(),
  /// the whole epoch's throughput. NaN before the epoch's first reduction.
  double epoch_samples_per_second() const;
  /// Every rank's throughput and step time split (wait: a collective in
  /// flight; compute: the rest) over the steps between the last two
  /// reductions, by each rank's own clock, in rank order (same on every
  /// rank). The rank that the others wait for is the one that waits least:
  /// DistributedDataParallel's all_reduces even out the step times. Empty
  /// before the first reduction.
  const std::vector<RankStats>& rank_stats() const { return rank_stats_; }
  /// Steps done in the current epoch on each rank.
  int64_t step() const { return step_; }

 private:
  void reduce();
  void show(bool final_of_epoch);
  std::string describe(bool bar) const;

  ProgressBarOptions options_;
  bool bar_ = false;
  bool printer_ = false;  // rank 0 and not ProgressBarStyle::kOff
  int64_t epoch_ = 0, total_epochs_ = 0, steps_ = 0, step_ = 0, first_step_ = 0;
  int64_t pending_calls_ = 0, pending_samples_ = 0, pending_loss_samples_ = 0;  // since the last reduction
  torch::Tensor loss_sum_;  // sum of loss * samples since the last reduction, on the loss's device
  double samples_per_second_, loss_;
  double epoch_samples_ = 0, epoch_seconds_ = 0;  // reduced since start_epoch (rank 0's clock)
  std::vector<RankStats> rank_stats_;
  int64_t wait_ns_at_reduction_ = 0;  // the collective clock at the last reduction
  std::chrono::steady_clock::time_point epoch_started_, last_reduction_, last_line_;
  bool printed_line_ = false;
};

}  // namespace rankwise::monitor
