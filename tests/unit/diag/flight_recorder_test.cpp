// The flight recorder's ring buffer, its JSON, and the collective progress records the
// ranks publish (what the hang diagnosis reads).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "wire/collective_progress.h"
#include "rankwise/error.h"
#include "rankwise/diag/flight_recorder.h"

using rankwise::diag::CollectiveRecord;
using rankwise::diag::FlightRecorder;

namespace {

CollectiveRecord call(const std::string& operation, int line) {
  CollectiveRecord r;
  r.operation = operation;
  r.dtype = "Float";
  r.sizes = {4, 2};
  r.reduce_op = operation == "all_reduce" ? "sum" : "";
  r.file = "/home/me/train.cpp";
  r.line = static_cast<uint32_t>(line);
  return r;
}

}  // namespace

TEST(FlightRecorder, KeepsTheLastNCollectivesInOrder) {
  FlightRecorder recorder(3);
  for (int i = 1; i <= 5; ++i) {
    const uint64_t s = recorder.enter(call("all_reduce", i));
    EXPECT_EQ(s, static_cast<uint64_t>(i));
    recorder.end(s, /*ok=*/i != 5);
  }
  const auto entries = recorder.entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].sequence, 3u);
  EXPECT_EQ(entries[2].sequence, 5u);
  EXPECT_EQ(entries[1].state, CollectiveRecord::State::kCompleted);
  EXPECT_EQ(entries[2].state, CollectiveRecord::State::kFailed);
  EXPECT_EQ(entries[2].line, 5u);
  EXPECT_EQ(recorder.last_completed(), 4u);
  EXPECT_EQ(recorder.last_entered().sequence, 5u);
  EXPECT_GE(entries[2].ended, entries[2].enqueued);
}

TEST(FlightRecorder, ZeroCapacityRecordsNothingButCounts) {
  FlightRecorder recorder(0);
  recorder.end(recorder.enter(call("barrier", 1)), true);
  EXPECT_EQ(recorder.enter(call("barrier", 2)), 2u);
  EXPECT_TRUE(recorder.entries().empty());
  EXPECT_EQ(recorder.last_completed(), 1u);
  EXPECT_EQ(recorder.last_entered().line, 2u);
}

TEST(FlightRecorder, DescribesACallAsErrorsNameIt) {
  auto r = call("all_reduce", 88);
  r.sequence = 12;
  EXPECT_EQ(rankwise::diag::describe(r), "all_reduce #12 (Float [4, 2], sum) at train.cpp:88");
  CollectiveRecord b;
  b.operation = "monitored_barrier";
  b.name = "eval-done";
  b.sequence = 3;
  EXPECT_EQ(rankwise::diag::describe(b), "monitored_barrier 'eval-done' #3");
  EXPECT_EQ(rankwise::diag::short_call_site("x.cpp", 4), "x.cpp:4");
}

TEST(FlightRecorder, JsonHasEveryField) {
  FlightRecorder recorder(4);
  recorder.end(recorder.enter(call("all_reduce", 10)), true);
  recorder.enter(call("broadcast", 11));
  const auto doc = nlohmann::json::parse(recorder.to_json(1, 2));
  EXPECT_EQ(doc.at("rank"), 1);
  EXPECT_EQ(doc.at("world_size"), 2);
  EXPECT_EQ(doc.at("capacity"), 4);
  ASSERT_EQ(doc.at("entries").size(), 2u);
  const auto& e = doc.at("entries")[1];
  EXPECT_EQ(e.at("sequence"), 2);
  EXPECT_EQ(e.at("operation"), "broadcast");
  EXPECT_EQ(e.at("dtype"), "Float");
  EXPECT_EQ(e.at("sizes"), nlohmann::json::array({4, 2}));
  EXPECT_EQ(e.at("file"), "/home/me/train.cpp");
  EXPECT_EQ(e.at("line"), 11);
  EXPECT_EQ(e.at("state"), "entered");
  EXPECT_EQ(doc.at("entries")[0].at("state"), "completed");
  EXPECT_GT(e.at("enqueued_us").get<int64_t>(), 1600000000000000);
}

TEST(FlightRecorder, DumpToAnUnwritablePathIsAnError) {
  FlightRecorder recorder(1);
  EXPECT_THROW(recorder.dump("/proc/rankwise/rank0.json", 0, 1), rankwise::Error);
}

TEST(CollectiveProgress, RoundTripsAndRejectsOtherText) {
  rankwise::wire::CollectiveProgress p;
  p.entered = 7;
  p.completed = 6;
  p.last = "barrier #7 at a.cpp:1";
  p.entered_ms = 123;
  p.heartbeat_ms = 456;
  p.exited = true;
  p.pid = 42;
  p.host = "node-a";
  const auto back = rankwise::wire::decode_progress(rankwise::wire::encode_progress(p));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->entered, 7u);
  EXPECT_EQ(back->completed, 6u);
  EXPECT_EQ(back->last, p.last);
  EXPECT_EQ(back->entered_ms, 123);
  EXPECT_EQ(back->heartbeat_ms, 456);
  EXPECT_TRUE(back->exited);
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->host, "node-a");
  EXPECT_FALSE(rankwise::wire::decode_progress("1"));
  EXPECT_FALSE(rankwise::wire::decode_progress("{\"entered\": \"x\"}"));
  EXPECT_FALSE(rankwise::wire::decode_progress("\x01\x02 not json"));
}
