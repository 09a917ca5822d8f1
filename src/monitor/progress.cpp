#include "rankwise/monitor/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "detail/check.h"
#include "detail/write_text.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "rankwise/process_group.h"

namespace rankwise::monitor {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string rate_text(double samples_per_second) {
  return std::isfinite(samples_per_second) ? fmt::format("{:.0f}", samples_per_second) : "-";
}

std::string loss_text(double loss) { return std::isfinite(loss) ? fmt::format("{:.4f}", loss) : "-"; }

}  // namespace

bool stdout_is_terminal() {
  if (auto launcher = get_env("RANKWISE_STDOUT_IS_TTY")) return *launcher == "1";
  return ::isatty(STDOUT_FILENO) == 1;
}

ProgressStyle parse_progress_style(const std::string& text) {
  if (text == "auto") return ProgressStyle::kAuto;
  if (text == "bar") return ProgressStyle::kBar;
  if (text == "lines") return ProgressStyle::kLines;
  if (text == "off") return ProgressStyle::kOff;
  throw ConfigError("rankwise: progress style '" + text + "' is not one of auto, bar, lines, off");
}

Progress::Progress(ProgressOptions options)
    : options_(std::move(options)), samples_per_second_(kNaN), loss_(kNaN) {
  RANKWISE_CHECK(options_.every_n_steps() >= 1, ConfigError,
                 "rankwise: ProgressOptions::every_n_steps is {}; it must be at least 1", options_.every_n_steps());
  RANKWISE_CHECK(options_.bar_width() >= 1, ConfigError,
                 "rankwise: ProgressOptions::bar_width is {}; it must be at least 1", options_.bar_width());
  RANKWISE_CHECK(options_.line_interval().count() >= 0, ConfigError,
                 "rankwise: ProgressOptions::line_interval is {} ms; it must not be negative",
                 options_.line_interval().count());
  const ProgressStyle style = options_.style();
  printer_ = style != ProgressStyle::kOff && is_rank_zero();
  bar_ = style == ProgressStyle::kBar || (style == ProgressStyle::kAuto && stdout_is_terminal());
  epoch_started_ = last_reduction_ = last_line_ = std::chrono::steady_clock::now();
}

Progress::~Progress() = default;

void Progress::start_epoch(int64_t epoch, int64_t total_epochs, int64_t steps, int64_t first_step) {
  RANKWISE_CHECK(steps >= 0 && first_step >= 0 && first_step <= steps, ConfigError,
                 "rankwise: Progress::start_epoch: {} steps with {} done already; give steps >= 0 and "
                 "first_step in [0, steps]",
                 steps, first_step);
  epoch_ = epoch;
  total_epochs_ = total_epochs;
  steps_ = steps;
  step_ = first_step_ = first_step;
  pending_calls_ = pending_samples_ = pending_loss_samples_ = 0;
  loss_sum_ = torch::Tensor();
  epoch_started_ = last_reduction_ = std::chrono::steady_clock::now();
}

bool Progress::update(int64_t samples, const torch::Tensor& loss) {
  ++step_;
  ++pending_calls_;
  pending_samples_ += samples;
  if (loss.defined()) {
    // Accumulated where the loss lives: no device-to-host copy per step.
    auto weighted = loss.detach().reshape({}).to(torch::kFloat64) * static_cast<double>(samples);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + weighted : weighted;
    pending_loss_samples_ += samples;
  }
  if (pending_calls_ < options_.every_n_steps()) return false;  // the count decides: the same on every rank
  reduce();
  show(/*final_of_epoch=*/false);
  return true;
}

bool Progress::end_epoch() {
  const bool reducing = pending_calls_ > 0;  // the count decides: the same on every rank
  if (reducing) reduce();
  show(/*final_of_epoch=*/true);
  return reducing;
}

void Progress::reduce() {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_reduction_).count();
  const double loss_sum = loss_sum_.defined() ? loss_sum_.item<double>() : 0.0;
  // Sums over ranks: samples, loss sum, loss weight, and rank 0's seconds
  // (0 elsewhere), so that every rank gets rank 0's interval.
  auto values = torch::tensor({static_cast<double>(pending_samples_), loss_sum,
                               static_cast<double>(pending_loss_samples_), is_rank_zero() ? seconds : 0.0},
                              torch::kFloat64);
  if (is_initialized()) process_group().all_reduce(values, ReduceOp::kSum);
  values = values.cpu();  // where the group left it (a GPU with NCCL)
  const auto v = values.accessor<double, 1>();
  samples_per_second_ = v[3] > 0 ? v[0] / v[3] : kNaN;
  loss_ = v[2] > 0 ? v[1] / v[2] : kNaN;
  pending_calls_ = pending_samples_ = pending_loss_samples_ = 0;
  loss_sum_ = torch::Tensor();
  last_reduction_ = now;
}

std::string Progress::describe(bool bar) const {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - epoch_started_).count();
  const int64_t done_here = step_ - first_step_;
  const double eta = done_here > 0 ? elapsed / static_cast<double>(done_here) * static_cast<double>(steps_ - step_) : kNaN;
  const std::string tail = fmt::format("{} samples/s | loss {} | ETA {}", rate_text(samples_per_second_),
                                       loss_text(loss_), clock_text(eta));
  const int64_t shown = std::min(step_, steps_);
  if (!bar) {
    const int64_t percent = steps_ > 0 ? shown * 100 / steps_ : 100;
    return fmt::format("progress: epoch {} of {}, step {}/{} ({}%) | {}", epoch_, total_epochs_, step_, steps_,
                       percent, tail);
  }
  const int64_t width = options_.bar_width();
  const int64_t filled = steps_ > 0 ? shown * width / steps_ : width;
  const int digits = static_cast<int>(fmt::format("{}", steps_).size());
  return fmt::format("epoch {} of {} [{}{}] {:>{}}/{} | {}", epoch_, total_epochs_, std::string(filled, '#'),
                     std::string(width - filled, '.'), step_, digits, steps_, tail);
}

void Progress::show(bool final_of_epoch) {
  if (!printer_) return;
  if (bar_) {
    // '\r' rewrites the line; "\x1b[K" clears what a longer earlier state left.
    std::fflush(stdout);
    detail::write_text(STDOUT_FILENO, "\r" + describe(true) + "\x1b[K" + (final_of_epoch ? "\n" : ""));
    return;
  }
  if (final_of_epoch) return;  // the program prints its own epoch summary
  const auto now = std::chrono::steady_clock::now();
  if (printed_line_ && now - last_line_ < options_.line_interval()) return;
  printed_line_ = true;
  last_line_ = now;
  print_line(describe(false));
}

}  // namespace rankwise::monitor
