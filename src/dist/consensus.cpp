#include "rankwise/dist/consensus.h"

#include <cmath>

#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::dist {
namespace {

// A process group with more than one rank, or nullptr (then everything is local).
ProcessGroup* group() {
  if (!is_initialized()) return nullptr;
  auto& pg = process_group();
  return pg.world_size() > 1 ? &pg : nullptr;
}

int64_t reduce_flag(bool value, ReduceOp op) {
  auto* pg = group();
  if (!pg) return value ? 1 : 0;
  auto t = torch::full({1}, value ? 1 : 0, torch::kLong);
  pg->all_reduce(t, op);
  return t.item<int64_t>();
}

void check_root(int root) {
  const int size = world_size();
  RANKWISE_CHECK(root >= 0 && root < size, ConfigError, core::here(),
                 "broadcast_decision: root {} is not a rank in [0, {})", root, size);
}

}  // namespace

bool any(bool value, std::source_location site) {
  const CallerSite caller(site);
  return reduce_flag(value, ReduceOp::kMax) != 0;
}

bool all(bool value, std::source_location site) {
  const CallerSite caller(site);
  return reduce_flag(value, ReduceOp::kMin) != 0;
}

namespace {
// Rank `root`'s one-element `value`, on every rank (as it is without a group).
torch::Tensor broadcast_one(torch::Tensor value, int root) {
  check_root(root);
  if (auto* pg = group()) pg->broadcast(value, root);
  return value;
}
}  // namespace

int64_t dist::detail::broadcast_int64(int64_t value, int root, const std::source_location& site) {
  const CallerSite caller(site);
  return broadcast_one(torch::full({1}, value, torch::kLong), root).item<int64_t>();
}

double dist::detail::broadcast_double(double value, int root, const std::source_location& site) {
  const CallerSite caller(site);
  return broadcast_one(torch::full({1}, value, torch::kDouble), root).item<double>();
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(options) {
  RANKWISE_CHECK(options_.patience() >= 0, ConfigError,
                 "EarlyStopping: patience must be >= 0, got {}", options_.patience());
  if (!(options_.min_delta() >= 0) || !std::isfinite(options_.min_delta())) {
    core::raise<ConfigError>(
        "EarlyStopping: min_delta must be finite and >= 0 (the size of an improvement, whatever "
        "the mode), got {}",
        options_.min_delta());
  }
  reset();
}

void EarlyStopping::reset() {
  best_ = options_.mode() == EarlyStoppingMode::kMin ? std::numeric_limits<double>::infinity()
                                                     : -std::numeric_limits<double>::infinity();
  best_epoch_ = -1;
  wait_ = 0;
  epochs_ = 0;
  stopped_epoch_ = -1;
}

bool EarlyStopping::step(double value) {
  if (options_.verify_agreement()) {
    if (auto* pg = group()) {
      // max(v) and max(-v) = -min(v) in one all_reduce. NaN is mapped to +inf
      // for the check (NaN != NaN) and flagged in a third slot.
      const bool nan = std::isnan(value);
      const double v = nan ? std::numeric_limits<double>::infinity() : value;
      auto t = torch::tensor({v, -v, nan ? 1.0 : 0.0, nan ? 0.0 : 1.0}, torch::kDouble);
      pg->all_reduce(t, ReduceOp::kMax);
      const double hi = t[0].item<double>(), lo = -t[1].item<double>();
      const bool some_nan = t[2].item<double>() > 0, some_number = t[3].item<double>() > 0;
      if (hi != lo || (some_nan && some_number)) {
        core::raise<CollectiveMismatchError>(
            core::here(),
            "EarlyStopping::step: the ranks passed different values (from {:.17g} to {:.17g}{}) "
            "at epoch {}, so they could stop in different epochs and hang. Pass a value reduced "
            "across ranks (e.g. Metric::compute()), not a rank-local one.",
            lo, hi, some_nan ? ", and NaN" : "", epochs_);
      }
    }
  }
  const bool improved = options_.mode() == EarlyStoppingMode::kMin
                            ? value < best_ - options_.min_delta()
                            : value > best_ + options_.min_delta();
  if (improved) {
    best_ = value;
    best_epoch_ = epochs_;
    wait_ = 0;
  } else {
    ++wait_;
    // As Lightning: only an epoch without improvement can decide to stop.
    if (stopped_epoch_ < 0 && wait_ >= options_.patience()) stopped_epoch_ = epochs_;
  }
  ++epochs_;
  return should_stop();
}

c10::Dict<std::string, torch::Tensor> EarlyStopping::state() const {
  c10::Dict<std::string, torch::Tensor> result;
  auto scalar = [](double v) { return torch::full({}, v, torch::kDouble); };
  result.insert("best", scalar(best_));
  result.insert("best_epoch", scalar(static_cast<double>(best_epoch_)));
  result.insert("wait_count", scalar(static_cast<double>(wait_)));
  result.insert("epochs", scalar(static_cast<double>(epochs_)));
  result.insert("stopped_epoch", scalar(static_cast<double>(stopped_epoch_)));
  return result;
}

void EarlyStopping::load_state(const c10::Dict<std::string, torch::Tensor>& state) {
  for (const char* key : {"best", "best_epoch", "wait_count", "epochs", "stopped_epoch"}) {
    RANKWISE_CHECK(state.contains(key), ConfigError, core::here(),
                   "EarlyStopping::load_state: entry '{}' is missing; pass what "
                   "EarlyStopping::state() returned",
                   key);
  }
  auto get = [&](const char* key) { return state.at(key).to(torch::kDouble).item<double>(); };
  best_ = get("best");
  best_epoch_ = static_cast<int64_t>(get("best_epoch"));
  wait_ = static_cast<int64_t>(get("wait_count"));
  epochs_ = static_cast<int64_t>(get("epochs"));
  stopped_epoch_ = static_cast<int64_t>(get("stopped_epoch"));
}

}  // namespace rankwise::dist
