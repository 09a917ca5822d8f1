// rankwise::monitor::MetricsLog in one process (rank 0): the records it
// writes (JSON Lines, exact fields and order), appending a resumed run's
// segment, the CSV long form, the errors for a path it cannot open, and a
// full disk (whole records kept, one warning per file, training goes on).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rankwise/error.h"
#include "rankwise/monitor/metrics_log.h"
#include "support/file_size_limit.h"

namespace rankwise::monitor {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "rankwise_metrics_log_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<nlohmann::json> read_records(const std::string& path) {
  std::vector<nlohmann::json> records;
  for (const auto& line : read_lines(path)) records.push_back(nlohmann::json::parse(line));  // throws if torn
  return records;
}

TEST(MetricsLog, ConfigRecordThenStepAndEpochRecords) {
  const std::string path = temp_path("records.jsonl");
  {
    MetricsLog log(MetricsLogOptions(path), {{"program", std::string("train")}, {"epochs", int64_t{3}},
                                              {"lr", 0.25}, {"shuffle", true}});
    EXPECT_TRUE(log.writing());
    log.log_step(20, 1, {{"loss", 0.5}, {"grad_norm", 2.0}}, 1000.0);
    log.log_epoch(1, 32, {{"test_accuracy", 0.8125}});
    // Records hit the file as they are written, before the log closes.
    EXPECT_EQ(read_lines(path).size(), 3u);
  }
  const auto r = read_records(path);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["kind"], "config");
  EXPECT_EQ(r[0]["version"], 1);
  EXPECT_EQ(r[0]["time"], 0.0);
  EXPECT_EQ(r[0]["world_size"], 1);
  EXPECT_EQ(r[0]["rankwise"], RANKWISE_VERSION);
  EXPECT_EQ(r[0]["started_at"].get<std::string>().size(), std::string("2026-12-03T17:00:00Z").size());
  EXPECT_EQ(r[0]["config"], (nlohmann::json{{"program", "train"}, {"epochs", 3}, {"lr", 0.25}, {"shuffle", true}}));
  // Keys in the documented order (the config in the caller's order).
  EXPECT_EQ(read_lines(path)[0].find("{\"kind\":\"config\",\"version\":1,\"time\":0.0,\"started_at\":"), 0u);
  EXPECT_NE(read_lines(path)[0].find("\"config\":{\"program\":\"train\",\"epochs\":3,\"lr\":0.25,\"shuffle\":true}"),
            std::string::npos);

  EXPECT_EQ(r[1]["kind"], "step");
  EXPECT_EQ(r[1]["step"], 20);
  EXPECT_EQ(r[1]["epoch"], 1);
  EXPECT_EQ(r[1]["metrics"], (nlohmann::json{{"loss", 0.5}, {"grad_norm", 2.0}}));
  EXPECT_EQ(r[1]["samples_per_s"], 1000.0);
  EXPECT_FALSE(r[1].contains("ranks"));
  EXPECT_EQ(r[2]["kind"], "epoch");
  EXPECT_EQ(r[2]["step"], 32);
  EXPECT_EQ(r[2]["epoch"], 1);
  EXPECT_EQ(r[2]["metrics"], (nlohmann::json{{"test_accuracy", 0.8125}}));
  EXPECT_FALSE(r[2].contains("samples_per_s"));  // not given: no field
  EXPECT_GE(r[2]["time"].get<double>(), r[1]["time"].get<double>());
  EXPECT_GE(r[1]["time"].get<double>(), 0.0);
}

TEST(MetricsLog, ValuesRoundTripExactlyAndNonFiniteIsNull) {
  const std::string path = temp_path("exact.jsonl");
  const double third = 1.0 / 3.0;
  {
    MetricsLog log{MetricsLogOptions(path)};
    log.log_epoch(2, 64, {{"accuracy", third}, {"nan", std::numeric_limits<double>::quiet_NaN()}});
  }
  const auto r = read_records(path);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1]["metrics"]["accuracy"].get<double>(), third);  // bit for bit: equal to what was printed from
  EXPECT_TRUE(r[1]["metrics"]["nan"].is_null());
}

TEST(MetricsLog, PerRankStatisticsWhenGiven) {
  LogRecord record;
  record.step = 7;
  record.epoch = 1;
  record.metrics = {{"loss", 1.5}};
  record.ranks = {{0, 100.0, 2.5, 10.0}, {1, 90.0, 0.5, 12.0}};
  EXPECT_EQ(format_record(record, 1.5),
            "{\"kind\":\"step\",\"step\":7,\"epoch\":1,\"time\":1.5,\"metrics\":{\"loss\":1.5},\"ranks\":["
            "{\"rank\":0,\"samples_per_s\":100.0,\"wait_ms\":2.5,\"compute_ms\":10.0},"
            "{\"rank\":1,\"samples_per_s\":90.0,\"wait_ms\":0.5,\"compute_ms\":12.0}]}");
}

TEST(MetricsLog, AppendStartsANewSegmentReplaceStartsAfresh) {
  const std::string path = temp_path("append.jsonl");
  {
    MetricsLog log{MetricsLogOptions(path)};
    log.log_step(1, 1, {{"loss", 2.0}});
  }
  {
    MetricsLog log(MetricsLogOptions(path).append(true));
    log.log_step(2, 1, {{"loss", 1.0}});
  }
  auto r = read_records(path);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0]["kind"], "config");
  EXPECT_EQ(r[1]["step"], 1);
  EXPECT_EQ(r[2]["kind"], "config");
  EXPECT_EQ(r[3]["step"], 2);
  { MetricsLog log{MetricsLogOptions(path)}; }
  r = read_records(path);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["kind"], "config");
}

TEST(MetricsLog, CsvInLongForm) {
  const std::string path = temp_path("long.jsonl"), csv = temp_path("long.csv");
  {
    MetricsLog log(MetricsLogOptions(path).csv_path(csv), {{"name", std::string("a,b")}, {"epochs", int64_t{2}}});
    log.log_step(5, 1, {{"loss", 0.5}}, 250.0);
  }
  const auto lines = read_lines(csv);
  ASSERT_EQ(lines.size(), 1u + 5u + 2u + 2u);
  EXPECT_EQ(lines[0], "kind,step,epoch,time,name,value");
  EXPECT_EQ(lines[1], "config,,,0,version,1");
  EXPECT_EQ(lines[2], "config,,,0,time,0.0");
  EXPECT_EQ(lines[3].rfind("config,,,0,started_at,20", 0), 0u);
  EXPECT_EQ(lines[4], "config,,,0,world_size,1");
  EXPECT_EQ(lines[5], std::string("config,,,0,rankwise,") + RANKWISE_VERSION);
  EXPECT_EQ(lines[6], "config,,,0,name,\"a,b\"");
  EXPECT_EQ(lines[7], "config,,,0,epochs,2");
  EXPECT_EQ(lines[8].rfind("step,5,1,", 0), 0u);
  EXPECT_EQ(lines[8].substr(lines[8].size() - 9), ",loss,0.5");
  EXPECT_EQ(lines[9].substr(lines[9].size() - 18), ",samples_per_s,250");
}

TEST(MetricsLog, EmptyPathWritesNothing) {
  MetricsLog log{MetricsLogOptions("")};
  EXPECT_FALSE(log.writing());
  log.log_step(1, 1, {{"loss", 1.0}});  // a no-op
}

TEST(MetricsLog, UnopenablePathIsAConfigErrorNamingIt) {
  try {
    MetricsLog log(MetricsLogOptions("/nonexistent-rankwise-dir/metrics.jsonl"));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open the metrics log '/nonexistent-rankwise-dir/metrics.jsonl' "
                                         "for writing: No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

// Two runs pointed at one log: the second is refused before it touches the
// file (no truncation, no interleaved records), naming the path.
TEST(MetricsLogLock, ASecondWriterIsRefusedAndTheFirstLogStaysWhole) {
  const std::string path = temp_path("locked.jsonl");
  MetricsLog first(MetricsLogOptions(path), {{"program", std::string("first")}});
  first.log_step(10, 1, {{"loss", 0.5}});
  for (bool append : {false, true}) {
    try {
      MetricsLog second(MetricsLogOptions(path).append(append));
      ADD_FAILURE() << "a second writer was accepted (append " << append << ")";
    } catch (const rankwise::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + path + "' is being written by another run"),
                std::string::npos)
          << e.what();
    }
  }
  first.log_step(20, 1, {{"loss", 0.25}});
  const auto records = read_records(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0]["config"]["program"], "first");
  EXPECT_EQ(records[2]["step"], 20);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A file size limit with SIGXFSZ ignored: the record that crosses it is
// written in part (a short write), then EFBIG, as on a disk that fills up.
TEST(MetricsLogFullDisk, TheRecordThatDoesNotFitIsCutOffAndEachFileWarnsOnce) {
  const std::string path = temp_path("full.jsonl"), csv = temp_path("full.csv");
  constexpr std::size_t kLimit = 4096;
  ::testing::internal::CaptureStderr();
  {
    test::FileSizeLimit limit(kLimit);
    MetricsLog log(MetricsLogOptions(path).csv_path(csv));
    for (int step = 1; step <= 100; ++step) log.log_step(step, 1, {{"loss", 0.5}, {"lr", 0.125}}, 1000.0);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (const auto& file : {path, csv}) {
    EXPECT_EQ(count(err, "warning: cannot write to '" + file + "': File too large"), 1) << err;
    const auto size = std::filesystem::file_size(file);
    EXPECT_GT(size, kLimit / 2);
    EXPECT_LE(size, kLimit);
    std::ifstream in(file);
    in.seekg(-1, std::ios::end);
    EXPECT_EQ(in.get(), '\n') << file << " ends in a torn record";
  }
  EXPECT_NE(err.find("file size limit (RLIMIT_FSIZE) of 4096 bytes (`ulimit -f` 4)"), std::string::npos) << err;
  const auto records = read_records(path);  // throws on a torn line
  EXPECT_GT(records.size(), 10u);
  EXPECT_EQ(records.back()["step"], records.size() - 1);  // records in order, none lost in between
  for (const auto& line : read_lines(csv)) EXPECT_EQ(count(line, ","), 5) << line;
}

}  // namespace
}  // namespace rankwise::monitor
