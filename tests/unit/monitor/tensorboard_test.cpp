// rankwise::monitor::TensorBoardWriter in one process (rank 0): its records
// byte by byte (the expected bytes made by TensorBoard's own protos and
// crc32c, see below), the file's name, the errors, a full disk; and MetricsLog's live
// TensorBoard file read back by TensorBoard's EventAccumulator while the log
// is still open, tag for tag equal to what rankwise-report --tensorboard
// exports from the same log (skipped without a Python that has tensorboard).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "rankwise/error.h"
#include "rankwise/monitor/metrics_log.h"
#include "rankwise/monitor/tensorboard.h"
#include "support/file_size_limit.h"
#include "support/shell.h"
#include "util/crc32.h"
#include "util/host_name.h"

namespace rankwise::monitor {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "rankwise_tensorboard_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  return dir;
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The expected records were printed by the wheel venv's Python with
// TensorBoard's own messages and CRC (not rankwise's code):
//   from tensorboard.compat.proto import event_pb2
//   from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
//   def rec(d): h = struct.pack("<Q", len(d)); return (h + struct.pack("<I", masked_crc32c(h)) + d
//                                                      + struct.pack("<I", masked_crc32c(d)))
//   e = event_pb2.Event(wall_time=1.5, step=7); e.summary.value.add(tag="loss", simple_value=0.25)
//   rec(e.SerializeToString())
const std::vector<unsigned char> kLossRecord = {
    0x1A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // length 26 (uint64, little-endian)
    0x12, 0x9B, 0xD8, 0x2D,                          // masked CRC-32C of the length
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F,  // wall_time (field 1, double) 1.5
    0x10, 0x07,                                            // step (field 2, varint) 7
    0x2A, 0x0D,                                            // summary (field 5), 13 bytes
    0x0A, 0x0B,                                            //   value (field 1), 11 bytes
    0x0A, 0x04, 0x6C, 0x6F, 0x73, 0x73,                    //     tag (field 1) "loss"
    0x15, 0x00, 0x00, 0x80, 0x3E,                          //     simple_value (field 2, float) 0.25
    0xC9, 0xD0, 0x7B, 0x8D};                               // masked CRC-32C of the data
// e = event_pb2.Event(wall_time=2.0, step=3)
// e.summary.value.add(tag="a", simple_value=0.0); e.summary.value.add(tag="b", simple_value=-1.0)
// A value of 0 is present (simple_value is in a oneof): without it TensorBoard drops the point.
const std::vector<unsigned char> kTwoValuesRecord = {
    0x21, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x7B, 0xEC, 0xF6, 0x09, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x10, 0x03, 0x2A, 0x14, 0x0A, 0x08, 0x0A, 0x01, 0x61,
    0x15, 0x00, 0x00, 0x00, 0x00, 0x0A, 0x08, 0x0A, 0x01, 0x62, 0x15, 0x00, 0x00, 0x80, 0xBF,
    0x08, 0x91, 0x63, 0x77};

TEST(TensorBoardWriter, RecordsAreTensorBoardsBytes) {
  const std::string dir = temp_dir("bytes");
  const double before = unix_now();
  std::vector<unsigned char> live;
  {
    TensorBoardWriter board(dir);
    ASSERT_TRUE(board.writing());
    board.add_scalar("loss", 0.25, 7, 1.5);
    board.add_scalars(3, {{"a", 0.0}, {"b", -1.0}}, 2.0);
    board.add_scalars(4, {});  // nothing
    live = read_bytes(board.path());  // written before the writer closes
  }
  const double after = unix_now();
  // The file_version event: Event{wall_time: now, file_version: "brain.Event:2"},
  // 24 bytes: rec(event_pb2.Event(wall_time=1.5, file_version="brain.Event:2")
  // .SerializeToString()) gives this header and this data but for wall_time.
  ASSERT_EQ(live.size(), 40 + kLossRecord.size() + kTwoValuesRecord.size());
  const std::vector<unsigned char> header = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xA3, 0x7F, 0x4B, 0x22};
  EXPECT_EQ(std::vector<unsigned char>(live.begin(), live.begin() + 12), header);
  EXPECT_EQ(live[12], 0x09);
  double wall_time = 0;
  std::memcpy(&wall_time, live.data() + 13, 8);
  EXPECT_GE(wall_time, before);
  EXPECT_LE(wall_time, after);
  const std::string version = "\x1A\x0D" "brain.Event:2";
  EXPECT_EQ(std::string(live.begin() + 21, live.begin() + 36), version);
  // Its data CRC (util::crc32c_update is checked on known vectors in crc32_test.cpp).
  const uint32_t crc = util::crc32c_update(0, live.data() + 12, 24);
  const uint32_t masked = ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
  EXPECT_EQ(std::vector<unsigned char>(live.begin() + 36, live.begin() + 40),
            (std::vector<unsigned char>{static_cast<unsigned char>(masked), static_cast<unsigned char>(masked >> 8),
                                        static_cast<unsigned char>(masked >> 16),
                                        static_cast<unsigned char>(masked >> 24)}));
  EXPECT_EQ(std::vector<unsigned char>(live.begin() + 40, live.begin() + 40 + kLossRecord.size()), kLossRecord);
  EXPECT_EQ(std::vector<unsigned char>(live.begin() + 40 + kLossRecord.size(), live.end()), kTwoValuesRecord);
}

TEST(TensorBoardWriter, NamesANewFileAsTensorBoardDoesInADirectoryItCreates) {
  const std::string dir = temp_dir("name") + "/runs/a";
  TensorBoardWriter first(dir);
  TensorBoardWriter second(dir);  // same second, same process: its own file
  EXPECT_EQ(first.directory(), dir);
  EXPECT_EQ(fs::path(first.path()).parent_path(), fs::path(dir));
  const std::regex name("events\\.out\\.tfevents\\.([0-9]+)\\.(.+)\\.([0-9]+)");
  std::smatch m;
  const std::string file = fs::path(first.path()).filename();
  ASSERT_TRUE(std::regex_match(file, m, name)) << file;
  EXPECT_NEAR(std::stod(m[1]), unix_now(), 5.0);
  EXPECT_EQ(m[2], util::host_name());
  EXPECT_EQ(m[3], std::to_string(::getpid()));
  EXPECT_NE(second.path(), first.path());
  EXPECT_TRUE(fs::exists(second.path()));
}

// Constructing a writer on `dir` throws ConfigError naming `dir` and `reason`.
void expect_config_error(const std::string& dir, const std::string& reason) {
  try {
    TensorBoardWriter board(dir);
    ADD_FAILURE() << "no error for " << dir;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + dir + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(TensorBoardWriter, ThrowsConfigErrorNamingTheDirectoryAndTheReason) {
  const std::string dir = temp_dir("errors");
  fs::create_directories(dir);
  const std::string file = dir + "/plain_file";
  std::ofstream(file) << "x";
  expect_config_error(file + "/board", "Not a directory");
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir + "/locked");
    fs::permissions(dir + "/locked", fs::perms::owner_read | fs::perms::owner_exec);
    expect_config_error(dir + "/locked", "Permission denied");
    fs::permissions(dir + "/locked", fs::perms::owner_all);
  }
  EXPECT_THROW(TensorBoardWriter(""), ConfigError);
  // Through MetricsLog: the same error, from its constructor.
  EXPECT_THROW(MetricsLog(MetricsLogOptions(dir + "/m.jsonl").tensorboard_dir(file + "/board")), ConfigError);
}

// A file size limit (SIGXFSZ ignored) met in the middle of a record: the
// file ends after the last whole TFRecord, one warning names it, and the
// writer stops (TensorBoard would stop reading at a torn record).
TEST(TensorBoardWriter, AFullDiskCutsTheTornRecordWarnsOnceAndStops) {
  const std::string dir = temp_dir("full");
  std::string path;
  ::testing::internal::CaptureStderr();
  {
    test::FileSizeLimit limit(1000);
    TensorBoardWriter board(dir);
    for (int step = 1; step < 100; ++step) board.add_scalar("loss", 0.25, step, 1.5);  // 42 bytes each
    EXPECT_FALSE(board.writing());
    path = board.path();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  const auto bytes = read_bytes(path);
  std::size_t at = 40;  // after the file_version record
  while (at < bytes.size() && at + kLossRecord.size() <= bytes.size()) {
    EXPECT_EQ(std::vector<unsigned char>(bytes.begin() + at, bytes.begin() + at + 12),
              std::vector<unsigned char>(kLossRecord.begin(), kLossRecord.begin() + 12));
    at += kLossRecord.size();
  }
  EXPECT_EQ(at, bytes.size()) << "a torn record at the end";
  EXPECT_GT(bytes.size(), 1000 - kLossRecord.size());
  const std::string warning = "rankwise: warning: cannot write to '" + path + "': File too large";
  EXPECT_NE(err.find(warning), std::string::npos) << err;
  EXPECT_EQ(err.find(warning), err.rfind(warning)) << err;
}

// The first Python among the build's two that has the tensorboard package, or "".
std::string python_with_tensorboard() {
  for (const char* python : {RANKWISE_PYTHON, RANKWISE_OTHER_PYTHON}) {
    if (test::shell(test::python(python) + "-c 'import tensorboard' 2>/dev/null && echo yes").find("yes") !=
        std::string::npos) {
      return python;
    }
  }
  return "";
}

// TensorBoard's reading of `dir` (tests/python/tensorboard_read.py).
nlohmann::json read_with_tensorboard(const std::string& python, const std::string& dir) {
  const std::string out = test::shell(test::python(python) + RANKWISE_SOURCE_DIR +
                                      "/tests/python/tensorboard_read.py '" + dir + "' 2>&1");
  try {
    return nlohmann::json::parse(out);
  } catch (const std::exception&) {
    ADD_FAILURE() << "tensorboard_read.py: " << out;
    return {};
  }
}

TEST(TensorBoardLive, TensorBoardReadsEveryScalarOfTheOpenLogAsTheReportExportsIt) {
  const std::string python = python_with_tensorboard();
  if (python.empty()) {
    GTEST_SKIP() << "no Python with the tensorboard package (" << RANKWISE_PYTHON << ", " << RANKWISE_OTHER_PYTHON
                 << "); scripts/setup-torch-wheel installs one";
  }
  const std::string dir = temp_dir("live");
  fs::create_directories(dir);
  const std::string board = dir + "/board";
  std::map<std::string, std::vector<std::pair<int64_t, double>>> expected;  // tag -> (step, value)
  const double before = unix_now();
  MetricsLog log(MetricsLogOptions(dir + "/metrics.jsonl").tensorboard_dir(board), {{"program", std::string("tb")}});
  for (int64_t step = 5; step < 30; step += 5) {
    const double loss = 2.0 / static_cast<double>(step) + 0.1234567;
    std::vector<RankStats> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back({r, 500.0 + r + static_cast<double>(step), 3.0 * r + 0.25, 40.0 - r});
      expected["rank" + std::to_string(r) + "/samples_per_s"].emplace_back(step, 500.0 + r + static_cast<double>(step));
      expected["rank" + std::to_string(r) + "/wait_ms"].emplace_back(step, 3.0 * r + 0.25);
      expected["rank" + std::to_string(r) + "/compute_ms"].emplace_back(step, 40.0 - r);
    }
    log.log_step(step, 1 + step / 15, {{"loss", loss}, {"skipped", std::numeric_limits<double>::quiet_NaN()}},
                 1000.0 + static_cast<double>(step), ranks);
    expected["loss"].emplace_back(step, loss);
    expected["samples_per_s"].emplace_back(step, 1000.0 + static_cast<double>(step));
  }
  log.log_epoch(1, 15, {{"test_accuracy", 0.8125}, {"train_loss", 0.5}}, 999.5);
  expected["epoch/test_accuracy"] = {{15, 0.8125}};
  expected["epoch/train_loss"] = {{15, 0.5}};
  expected["epoch/samples_per_s"] = {{15, 999.5}};
  const double after = unix_now();

  // Live: read while the log (and its event file) is still open.
  const nlohmann::json got = read_with_tensorboard(python, board);
  ASSERT_TRUE(got.contains("scalars")) << got.dump();
  ASSERT_EQ(got["files"].size(), 1u) << got.dump();
  std::map<std::string, std::vector<std::pair<int64_t, double>>> seen;
  for (const auto& [tag, points] : got["scalars"].items()) {
    for (const auto& p : points) {
      seen[tag].emplace_back(p[0].get<int64_t>(), p[1].get<double>());
      EXPECT_GE(p[2].get<double>(), before - 1e-3) << tag;
      EXPECT_LE(p[2].get<double>(), after + 1e-3) << tag;
    }
  }
  for (auto& [tag, points] : expected) {
    for (auto& [step, value] : points) value = static_cast<double>(static_cast<float>(value));  // simple_value
  }
  EXPECT_EQ(seen, expected);  // every tag, step and value; the NaN left out

  // The same tags, steps and values as rankwise-report --tensorboard gives from the log.
  const std::string exported = dir + "/exported";
  const std::string report = test::shell(std::string(RANKWISE_REPORT_PATH) + " '" + dir + "/metrics.jsonl' --tensorboard '" +
                                         exported + "' 2>&1");
  ASSERT_NE(report.find("wrote"), std::string::npos) << report;
  const nlohmann::json other = read_with_tensorboard(python, exported);
  ASSERT_TRUE(other.contains("scalars")) << other.dump();
  std::map<std::string, std::vector<std::pair<int64_t, double>>> from_report;
  for (const auto& [tag, points] : other["scalars"].items()) {
    for (const auto& p : points) from_report[tag].emplace_back(p[0].get<int64_t>(), p[1].get<double>());
  }
  EXPECT_EQ(seen, from_report);
}

}  // namespace
}  // namespace rankwise::monitor
