// Single-process tests of consensus.h: the EarlyStopping rule (Keras /
// Lightning) on hand-made sequences, and the collectives' local behaviour.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "rankwise/dist/consensus.h"
#include "rankwise/error.h"

using rankwise::dist::EarlyStopping;
using rankwise::dist::EarlyStoppingMode;
using rankwise::dist::EarlyStoppingOptions;

namespace {
// 0-based epoch at which step() first returned true; -1 if never.
int64_t stop_epoch(EarlyStopping& es, const std::vector<double>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (es.step(values[i])) return static_cast<int64_t>(i);
  }
  return -1;
}
}  // namespace

TEST(EarlyStopping, MinModePatience) {
  EarlyStopping es(EarlyStoppingOptions().patience(3));
  // best 0.9 at epoch 1; epochs 2, 3, 4 do not improve -> stop at 4.
  EXPECT_EQ(stop_epoch(es, {1.0, 0.9, 0.95, 0.92, 0.91, 0.5}), 4);
  EXPECT_EQ(es.best(), 0.9);
  EXPECT_EQ(es.best_epoch(), 1);
  EXPECT_EQ(es.stopped_epoch(), 4);
  EXPECT_TRUE(es.should_stop());
}

TEST(EarlyStopping, MinDeltaMustBeExceeded) {
  EarlyStopping es(EarlyStoppingOptions().patience(2).min_delta(0.05));
  // 1.0 best; 0.96 is not < 0.95 (wait 1); 0.94 is (best 0.94); 0.9 and 0.895
  // are not < 0.89 (wait 1, 2) -> stop at 4.
  EXPECT_EQ(stop_epoch(es, {1.0, 0.96, 0.94, 0.9, 0.895}), 4);
  EXPECT_EQ(es.best(), 0.94);
}

TEST(EarlyStopping, MaxModeEqualIsNotImprovement) {
  EarlyStopping es(EarlyStoppingOptions().mode(EarlyStoppingMode::kMax).patience(2));
  EXPECT_EQ(stop_epoch(es, {0.5, 0.6, 0.6, 0.55}), 3);
  EXPECT_EQ(es.best(), 0.6);
}

TEST(EarlyStopping, PatienceZeroAndNaN) {
  EarlyStopping zero(EarlyStoppingOptions().patience(0));
  EXPECT_EQ(stop_epoch(zero, {1.0, 1.0}), 1);  // the first epoch improves on +inf
  EarlyStopping nan(EarlyStoppingOptions().patience(2));
  EXPECT_EQ(stop_epoch(nan, {1.0, NAN, NAN}), 2);  // NaN never improves
}

TEST(EarlyStopping, StateRoundTripAndErrors) {
  EarlyStopping a(EarlyStoppingOptions().patience(3));
  a.step(1.0);
  a.step(1.1);
  EarlyStopping b(EarlyStoppingOptions().patience(3));
  b.load_state(a.state());
  EXPECT_EQ(b.best(), 1.0);
  EXPECT_EQ(b.wait_count(), 1);
  EXPECT_EQ(b.epochs(), 2);
  EXPECT_FALSE(b.step(1.2));
  EXPECT_TRUE(b.step(1.3));
  EXPECT_EQ(b.stopped_epoch(), 3);
  EXPECT_THROW(EarlyStopping(EarlyStoppingOptions().patience(-1)), rankwise::ConfigError);
  EXPECT_THROW(EarlyStopping(EarlyStoppingOptions().min_delta(-0.1)), rankwise::ConfigError);
  EXPECT_THROW(b.load_state(c10::Dict<std::string, torch::Tensor>()), rankwise::ConfigError);
}

TEST(Consensus, LocalWithoutProcessGroup) {
  EXPECT_TRUE(rankwise::dist::any(true));
  EXPECT_FALSE(rankwise::dist::any(false));
  EXPECT_TRUE(rankwise::dist::all(true));
  EXPECT_FALSE(rankwise::dist::all(false));
  EXPECT_EQ(rankwise::dist::broadcast_decision(true), true);
  EXPECT_EQ(rankwise::dist::broadcast_decision(int64_t{42}), 42);
  EXPECT_EQ(rankwise::dist::broadcast_decision(2.5), 2.5);
  EXPECT_THROW(rankwise::dist::broadcast_decision(true, 1), rankwise::ConfigError);
}
