#pragma once
/// \file consensus.h
/// Decisions every rank agrees on. Every rank runs the whole program, so a
/// decision taken from rank-local data ("my loss stopped improving") can
/// differ between ranks; the rank that leaves the loop first leaves the others
/// waiting at the next collective. These helpers make every rank reach the
/// same answer.
///
/// All functions here are collective (every rank, same order) when a process
/// group is initialized with more than one rank; otherwise they are local and
/// communicate nothing.

#include <ATen/core/Dict.h>
#include <torch/types.h>

#include <torch/arg.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace rankwise::dist {

/// True on every rank when `value` is true on at least one rank (an
/// all_reduce of one int64 with MAX). Collective.
bool any(bool value);

/// True on every rank when `value` is true on every rank (all_reduce, MIN). Collective.
bool all(bool value);

namespace detail {
int64_t broadcast_int64(int64_t value, int root);
double broadcast_double(double value, int root);
}  // namespace detail

/// Rank `root`'s `decision`, returned on every rank (a broadcast of one
/// element). T is bool, an integer type (carried as int64) or a floating type
/// (carried as float64). Collective. Throws ConfigError when root is not a
/// rank of the group.
template <typename T>
T broadcast_decision(T decision, int root = 0) {
  static_assert(std::is_arithmetic<T>::value, "broadcast_decision takes bool, integers or floats");
  if constexpr (std::is_floating_point<T>::value) {
    return static_cast<T>(detail::broadcast_double(static_cast<double>(decision), root));
  } else if constexpr (std::is_same<T, bool>::value) {
    return detail::broadcast_int64(decision ? 1 : 0, root) != 0;
  } else {
    return static_cast<T>(detail::broadcast_int64(static_cast<int64_t>(decision), root));
  }
}

/// Whether a smaller or a larger monitored value is better.
enum class EarlyStoppingMode { kMin, kMax };

/// Options of EarlyStopping, with the names and defaults of PyTorch
/// Lightning's EarlyStopping callback (mode "min", patience 3, min_delta 0);
/// setters and getters as torch::nn options.
///
/// Example:
/// \code
///   rankwise::dist::EarlyStopping stopper(
///       rankwise::dist::EarlyStoppingOptions().mode(rankwise::dist::EarlyStoppingMode::kMax).patience(5));
/// \endcode
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

/// Stops training when a monitored value stopped improving, with the same
/// decision on every rank because it is taken from a value reduced across
/// ranks (e.g. Metric::compute() of a validation loss), never a rank-local one.
///
/// Rule (Keras and PyTorch Lightning EarlyStopping): the best value starts at
/// +inf (kMin) or -inf (kMax). An epoch's value improves when
///   kMin: value < best - min_delta        kMax: value > best + min_delta
/// An improvement sets best = value and the wait count to 0; otherwise the
/// wait count grows by one, and training stops once it reaches `patience`.
/// A NaN value never improves.
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
