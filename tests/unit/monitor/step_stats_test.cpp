// Heartbeats (monitor/step_stats.h): the heartbeat fields of the progress
// record (encoding, and decoding records of older and newer writers), the
// step rates derived from two readings of the step counters, and the time
// with a collective in flight (diag/collective_clock.h), which is the
// waiting part of a step.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "wire/collective_progress.h"
#include "diag/step_counters.h"
#include "diag/collective_clock.h"
#include "rankwise/monitor/step_stats.h"

namespace {

using rankwise::wire::decode_progress;
using rankwise::wire::encode_progress;
using rankwise::wire::CollectiveProgress;
using rankwise::diag::rates_between;
using rankwise::diag::StepSample;

TEST(Heartbeat, FieldsRoundTripThroughTheRecord) {
  CollectiveProgress p;
  p.heartbeat_ms = 1000;
  p.host = "h";
  p.step = 120;
  p.samples_per_s = 2048.5;
  p.step_ms = 52.25;
  p.wait_ms = 14.5;
  p.loss = 0.375;
  p.rss_bytes = 123456789;
  p.device = "cuda:1";
  const auto back = decode_progress(encode_progress(p));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->step, 120);
  EXPECT_EQ(back->samples_per_s, 2048.5);
  EXPECT_EQ(back->step_ms, 52.25);
  EXPECT_EQ(back->wait_ms, 14.5);
  ASSERT_TRUE(back->loss);
  EXPECT_EQ(*back->loss, 0.375);
  EXPECT_EQ(back->rss_bytes, 123456789);
  EXPECT_EQ(back->device, "cuda:1");
  EXPECT_EQ(back->host, "h");
}

TEST(Heartbeat, NonFiniteLossSurvivesJson) {
  CollectiveProgress p;
  p.step = 3;
  p.loss = std::nan("");
  auto back = decode_progress(encode_progress(p));
  ASSERT_TRUE(back && back->loss);
  EXPECT_TRUE(std::isnan(*back->loss));
  p.loss = -INFINITY;
  back = decode_progress(encode_progress(p));
  ASSERT_TRUE(back && back->loss);
  EXPECT_EQ(*back->loss, -INFINITY);
}

TEST(Heartbeat, RecordsWithoutStepsLeaveTheFieldsOut) {
  CollectiveProgress p;  // a rank that never called record_step
  const std::string text = encode_progress(p);
  EXPECT_EQ(text.find("\"step\""), std::string::npos) << text;
  EXPECT_EQ(text.find("\"loss\""), std::string::npos) << text;
  const auto back = decode_progress(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->step, -1);
  EXPECT_FALSE(back->loss);
}

TEST(Heartbeat, OlderAndNewerRecordsDecode) {
  // A record of the release before heartbeats: no heartbeat fields.
  const auto old = decode_progress(
      R"({"entered":3,"completed":3,"failed":false,"last":"barrier #3 at a.cpp:1",)"
      R"("entered_ms":1,"ended_ms":2,"heartbeat_ms":5,"exited":false,"pid":7,"host":"h"})");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->completed, 3u);
  EXPECT_EQ(old->step, -1);
  EXPECT_EQ(old->step_ms, 0);
  EXPECT_EQ(old->rss_bytes, 0);
  EXPECT_EQ(old->device, "");
  // A newer writer: unknown fields are ignored, a heartbeat field of an
  // unexpected type loses only itself.
  const auto newer = decode_progress(
      R"({"entered":3,"completed":3,"failed":false,"last":"","entered_ms":1,"ended_ms":2,)"
      R"("heartbeat_ms":5,"exited":false,"pid":7,"host":"h","step":9,"step_ms":"fast",)"
      R"("wait_ms":1.5,"gpu_temperature":71,"loss":{"x":1}})");
  ASSERT_TRUE(newer);
  EXPECT_EQ(newer->step, 9);
  EXPECT_EQ(newer->step_ms, 0);
  EXPECT_EQ(newer->wait_ms, 1.5);
  EXPECT_FALSE(newer->loss);
}

TEST(Heartbeat, RatesArePerStepBetweenTwoReadings) {
  StepSample a{10, 640, 1'000'000'000, 200'000'000, 0.5};
  StepSample b{30, 1920, 2'000'000'000, 500'000'000, 0.25};
  const auto r = rates_between(a, b);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->step_ms, 50.0);        // 1 s over 20 steps
  EXPECT_DOUBLE_EQ(r->wait_ms, 15.0);        // 300 ms over 20 steps
  EXPECT_DOUBLE_EQ(r->samples_per_s, 1280);  // 1280 samples in 1 s
  EXPECT_FALSE(rates_between(b, b));         // no step in between
  EXPECT_FALSE(rates_between(b, a));
  // Waiting is never counted beyond the wall time.
  StepSample c{31, 1984, 2'010'000'000, 900'000'000, 0.25};
  EXPECT_DOUBLE_EQ(rates_between(b, c)->wait_ms, 10.0);
}

TEST(Heartbeat, RecordStepCountsStepsSamplesAndLoss) {
  const StepSample before = rankwise::diag::step_sample();
  rankwise::monitor::record_step(32, 1.5);
  rankwise::monitor::record_step(16);  // keeps the last loss
  const StepSample after = rankwise::diag::step_sample();
  EXPECT_EQ(after.steps - before.steps, 2);
  EXPECT_EQ(after.samples - before.samples, 48);
  ASSERT_TRUE(after.loss);
  EXPECT_EQ(*after.loss, 1.5);
  EXPECT_GE(after.end_ns, before.end_ns);
}

TEST(Heartbeat, TimeInCollectivesIsTheUnionOfTheirIntervals) {
  using namespace std::chrono_literals;
  rankwise::diag::CollectiveClock clock;
  EXPECT_EQ(clock.total().count(), 0);
  clock.begin(1);
  std::this_thread::sleep_for(60ms);
  clock.begin(2);  // overlaps 1: counted once
  std::this_thread::sleep_for(60ms);
  clock.end(1);
  std::this_thread::sleep_for(60ms);
  clock.end(2);
  clock.end(2);  // a failed collective may be ended twice
  clock.end(7);  // never begun
  const auto busy = clock.total();
  EXPECT_GE(busy, 180ms);
  EXPECT_LT(busy, 2000ms);  // not 300 ms per collective, nor growing
  std::this_thread::sleep_for(60ms);  // nothing in flight: no change
  EXPECT_EQ(clock.total(), busy);
  clock.begin(3);  // an open one counts up to now
  std::this_thread::sleep_for(60ms);
  EXPECT_GE(clock.total(), busy + 60ms);
  clock.end(3);
}

}  // namespace
