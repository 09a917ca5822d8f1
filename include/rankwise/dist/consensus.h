#pragma once
/// \file consensus.h
/// Decisions every rank agrees on (a decision from rank-local data can differ between ranks,
/// and the rank that leaves a loop first leaves the others waiting). Every function here is
/// collective (every rank, same order) with a process group of several ranks, else local.
/// See docs/metrics.md#decisions-every-rank-agrees-on.

#include <ATen/core/Dict.h>
#include <torch/types.h>

#include <torch/arg.h>

#include <cstdint>
#include <limits>
#include <source_location>
#include <string>
#include <type_traits>

namespace rankwise::dist {

/// True on every rank when `value` is true on at least one rank (an
/// all_reduce of one int64 with MAX). Collective.
bool any(bool value, std::source_location site = std::source_location::current());

/// True on every rank when `value` is true on every rank (all_reduce, MIN). Collective.
bool all(bool value, std::source_location site = std::source_location::current());

namespace detail {
int64_t broadcast_int64(int64_t value, int root, const std::source_location& site);
double broadcast_double(double value, int root, const std::source_location& site);
}  // namespace detail

/// Rank `root`'s `decision`, returned on every rank (a broadcast of one
/// element). T is bool, an integer type (carried as int64) or a floating type
/// (carried as float64). Collective. Throws ConfigError when root is not a
/// rank of the group.
template <typename T>
T broadcast_decision(T decision, int root = 0, std::source_location site = std::source_location::current()) {
  static_assert(std::is_arithmetic<T>::value, "broadcast_decision takes bool, integers or floats");
  if constexpr (std::is_floating_point<T>::value) {
    return static_cast<T>(detail::broadcast_double(static_cast<double>(decision), root, site));
  } else if constexpr (std::is_same<T, bool>::value) {
    return detail::broadcast_int64(decision ? 1 : 0, root, site) != 0;
  } else {
    return static_cast<T>(detail::broadcast_int64(static_cast<int64_t>(decision), root, site));
  }
}

/// Whether a smaller or a larger monitored value is better.
enum class EarlyStoppingMode { kMin, kMax };

/// Options of EarlyStopping, with PyTorch Lightning's names and defaults (mode "min", patience
/// 3, min_delta 0; setters and getters as torch::nn options), e.g. .mode(kMax).patience(5).
struct EarlyStoppingOptions {
  /// kMin (a loss) or kMax (an accuracy).
  TORCH_ARG(EarlyStoppingMode, mode) = EarlyStoppingMode::kMin;
  /// Number of epochs without improvement after which to stop (>= 0).
  TORCH_ARG(int64_t, patience) = 3;
  /// The smallest change that counts as an improvement (>= 0), in the units of the value.
  TORCH_ARG(double, min_delta) = 0.0;
  /// When true (default), step() checks with one all_reduce that every rank
  /// passed the same value and throws CollectiveMismatchError otherwise. Turn
  /// it off only when the value is known to be identical (then step() is local).
  TORCH_ARG(bool, verify_agreement) = true;
};

/// Stops training when a monitored value, reduced across ranks (e.g. Metric::compute()), stopped
/// improving: the same decision on every rank. Rule (Keras, Lightning): best starts at +inf
/// (kMin) or -inf (kMax); a value improves when < best - min_delta (kMin) or > best + min_delta
/// (kMax), setting best and wait = 0; else wait grows, stopping at `patience`. NaN never improves.
class EarlyStopping {
 public:
  /// Throws ConfigError when patience < 0 or min_delta < 0 or is not finite.
  explicit EarlyStopping(EarlyStoppingOptions options = {});

  /// Records one epoch's monitored `value`, which must already be reduced
  /// across ranks, and returns true when training should stop now. Every rank
  /// gets the same answer. Collective (one all_reduce of 2 float64) when
  /// verify_agreement is on and a process group with several ranks exists.
  /// Throws CollectiveMismatchError (on every rank) when the ranks passed
  /// different values: pass a reduced metric, not a rank-local one.
  bool step(double value);

  /// True once step() returned true (until reset()).
  bool should_stop() const { return stopped_epoch_ >= 0; }
  /// Best value seen (+inf/-inf before the first step).
  double best() const { return best_; }
  /// 0-based index of the step that gave best(); -1 before any improvement.
  int64_t best_epoch() const { return best_epoch_; }
  /// Steps since the last improvement.
  int64_t wait_count() const { return wait_; }
  /// Number of step() calls.
  int64_t epochs() const { return epochs_; }
  /// 0-based index of the step that decided to stop; -1 while training goes on.
  int64_t stopped_epoch() const { return stopped_epoch_; }
  const EarlyStoppingOptions& options() const { return options_; }

  /// Back to the state after construction. Local.
  void reset();
  /// The state as float64 0-d tensors: "best", "best_epoch", "wait_count",
  /// "epochs", "stopped_epoch" (replicated: identical on every rank; save from rank 0).
  c10::Dict<std::string, torch::Tensor> state() const;
  /// Restores state(). Throws ConfigError when an entry is missing.
  void load_state(const c10::Dict<std::string, torch::Tensor>& state);

 private:
  EarlyStoppingOptions options_;
  double best_;
  int64_t best_epoch_ = -1;
  int64_t wait_ = 0;
  int64_t epochs_ = 0;
  int64_t stopped_epoch_ = -1;
};

}  // namespace rankwise::dist
