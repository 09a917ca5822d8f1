#include "rankwise/monitor/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/check.h"
#include "diag/collective_clock.h"
#include "util/io.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "rankwise/dist/process_group.h"

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

ProgressBarStyle parse_progress_style(const std::string& text) {
  if (text == "auto") return ProgressBarStyle::kAuto;
  if (text == "bar") return ProgressBarStyle::kBar;
  if (text == "lines") return ProgressBarStyle::kLines;
  if (text == "off") return ProgressBarStyle::kOff;
  core::raise<ConfigError>("progress style '{}' is not one of auto, bar, lines, off", text);
}

ProgressBar::ProgressBar(ProgressBarOptions options)
    : options_(std::move(options)), samples_per_second_(kNaN), loss_(kNaN) {
  RANKWISE_CHECK(options_.every_n_steps() >= 1, ConfigError,
                 "ProgressBarOptions::every_n_steps is {}; it must be at least 1",
                 options_.every_n_steps());
  RANKWISE_CHECK(options_.bar_width() >= 1, ConfigError,
                 "ProgressBarOptions::bar_width is {}; it must be at least 1",
                 options_.bar_width());
  RANKWISE_CHECK(options_.line_interval().count() >= 0, ConfigError,
                 "ProgressBarOptions::line_interval is {} ms; it must not be negative",
                 options_.line_interval().count());
  const ProgressBarStyle style = options_.style();
  printer_ = style != ProgressBarStyle::kOff && is_rank_zero();
  bar_ = style == ProgressBarStyle::kBar || (style == ProgressBarStyle::kAuto && stdout_is_terminal());
  epoch_started_ = last_reduction_ = last_line_ = std::chrono::steady_clock::now();
  wait_ns_at_reduction_ = diag::collective_clock().total().count();
}

ProgressBar::~ProgressBar() = default;

void ProgressBar::start_epoch(int64_t epoch, int64_t total_epochs, int64_t steps, int64_t first_step) {
  RANKWISE_CHECK(steps >= 0 && first_step >= 0 && first_step <= steps, ConfigError,
                 "ProgressBar::start_epoch: {} steps with {} done already; give steps >= 0 and "
                 "first_step in [0, steps]",
                 steps, first_step);
  epoch_ = epoch;
  total_epochs_ = total_epochs;
  steps_ = steps;
  step_ = first_step_ = first_step;
  pending_calls_ = pending_samples_ = pending_loss_samples_ = 0;
  loss_sum_ = torch::Tensor();
  epoch_samples_ = epoch_seconds_ = 0;
  epoch_started_ = last_reduction_ = std::chrono::steady_clock::now();
  wait_ns_at_reduction_ = diag::collective_clock().total().count();
}

bool ProgressBar::update(int64_t samples, const torch::Tensor& loss, std::source_location site) {
  const dist::CallerSite caller(site);
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

bool ProgressBar::end_epoch(std::source_location site) {
  const dist::CallerSite caller(site);
  const bool reducing = pending_calls_ > 0;  // the count decides: the same on every rank
  if (reducing) reduce();
  show(/*final_of_epoch=*/true);
  return reducing;
}

void ProgressBar::reduce() {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_reduction_).count();
  const int64_t wait_ns = diag::collective_clock().total().count();
  const double wait_seconds = static_cast<double>(wait_ns - wait_ns_at_reduction_) * 1e-9;
  const double loss_sum = loss_sum_.defined() ? loss_sum_.item<double>() : 0.0;
  // Each rank's samples, loss sum, loss weight, own seconds and seconds with
  // a collective in flight, gathered to every rank, summed there in rank
  // order (so every rank gets the same values, bit for bit).
  const auto mine = torch::tensor({static_cast<double>(pending_samples_), loss_sum,
                                   static_cast<double>(pending_loss_samples_), seconds, wait_seconds},
                                  torch::kFloat64);
  std::vector<torch::Tensor> gathered{mine};
  if (dist::is_initialized()) gathered = dist::process_group().all_gather(mine);
  double samples = 0, loss_total = 0, loss_weight = 0;
  rank_stats_.clear();
  const auto steps = static_cast<double>(std::max<int64_t>(pending_calls_, 1));
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    const auto values = gathered[r].cpu();  // where the group left it (a GPU with NCCL)
    const auto v = values.accessor<double, 1>();
    samples += v[0];
    loss_total += v[1];
    loss_weight += v[2];
    rank_stats_.push_back({static_cast<int>(r), v[3] > 0 ? v[0] / v[3] : kNaN, v[4] / steps * 1000,
                           std::max(0.0, v[3] - v[4]) / steps * 1000});
  }
  // Global throughput by rank 0's clock, the same on every rank.
  const double rank0_seconds = gathered.front().cpu()[3].item<double>();
  samples_per_second_ = rank0_seconds > 0 ? samples / rank0_seconds : kNaN;
  epoch_samples_ += samples;
  epoch_seconds_ += rank0_seconds;
  loss_ = loss_weight > 0 ? loss_total / loss_weight : kNaN;
  pending_calls_ = pending_samples_ = pending_loss_samples_ = 0;
  loss_sum_ = torch::Tensor();
  last_reduction_ = now;
  wait_ns_at_reduction_ = wait_ns;
}

double ProgressBar::epoch_samples_per_second() const {
  return epoch_seconds_ > 0 ? epoch_samples_ / epoch_seconds_ : kNaN;
}

std::string ProgressBar::describe(bool bar) const {
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

void ProgressBar::show(bool final_of_epoch) {
  if (!printer_) return;
  if (bar_) {
    // '\r' rewrites the line; "\x1b[K" clears what a longer earlier state left.
    std::fflush(stdout);
    util::write_text(STDOUT_FILENO, "\r" + describe(true) + "\x1b[K" + (final_of_epoch ? "\n" : ""));
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
