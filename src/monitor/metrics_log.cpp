#include "rankwise/monitor/metrics_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "monitor/record_file.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/monitor/tensorboard.h"

namespace rankwise::monitor {
namespace {

using Json = nlohmann::ordered_json;

std::unique_ptr<RecordFile> open_file(const std::string& path, bool append, const char* what) {
  RANKWISE_CHECK(!path.empty(), ConfigError,
                 "metrics log: the {} path is empty; give a file name (e.g. metrics.jsonl)", what);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : 0), 0644);
  RANKWISE_CHECK(fd >= 0, ConfigError,
                 "metrics log: cannot open the {} '{}' for writing: {}; check that its directory "
                 "exists and is writable, or choose another path",
                 what, path, std::strerror(errno));
  // One writer at a time (flock(2), released when the process dies): a second
  // run writing the same file would interleave and tear its records. The
  // lock comes before truncation, so the first run's file is left whole.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    RANKWISE_CHECK(false, ConfigError,
                   "metrics log: the {} '{}' is being written by another run ({}); give each run "
                   "its own path (--metrics-log)",
                   what, path,
                   error == EWOULDBLOCK ? "it holds the file's lock" : std::strerror(error));
  }
  if (!append && ::ftruncate(fd, 0) != 0) {
    const int error = errno;
    ::close(fd);
    RANKWISE_CHECK(false, ConfigError, "metrics log: cannot truncate the {} '{}': {}", what, path,
                   std::strerror(error));
  }
  return std::make_unique<RecordFile>(fd, path);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

Json to_json(const ConfigValue& value) {
  return std::visit([](const auto& v) { return Json(v); }, value);
}

// A CSV field: quoted when it holds a comma, quote or line break (RFC 4180).
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_number(double value) { return std::isfinite(value) ? fmt::format("{}", value) : ""; }

// The TensorBoard scalars of a step or epoch record, tagged as rankwise-report
// --tensorboard tags them (tools/rankwise-report: scalars()).
std::vector<std::pair<std::string, double>> tensorboard_scalars(const LogRecord& record) {
  std::vector<std::pair<std::string, double>> out;
  if (record.kind != "step" && record.kind != "epoch") return out;
  const std::string prefix = record.kind == "epoch" ? "epoch/" : "";
  auto add = [&out](std::string tag, double value) {
    if (std::isfinite(value)) out.emplace_back(std::move(tag), value);
  };
  for (const auto& [name, value] : record.metrics) add(prefix + name, value);
  if (record.samples_per_s) add(prefix + "samples_per_s", *record.samples_per_s);
  for (const auto& r : record.ranks) {
    add(fmt::format("rank{}/samples_per_s", r.rank), r.samples_per_s);
    add(fmt::format("rank{}/wait_ms", r.rank), r.wait_ms);
    add(fmt::format("rank{}/compute_ms", r.rank), r.compute_ms);
  }
  return out;
}

}  // namespace

struct MetricsLog::Files {
  std::unique_ptr<RecordFile> jsonl;
  std::unique_ptr<RecordFile> csv;  // null without a CSV path
  std::unique_ptr<TensorBoardWriter> tensorboard;
  double started_unix = 0;  // the wall clock when the log was opened (Unix seconds)
};

std::string format_record(const LogRecord& record, double time) {
  Json line;
  line["kind"] = record.kind;
  line["step"] = record.step;
  line["epoch"] = record.epoch;
  line["time"] = time;
  Json metrics = Json::object();
  for (const auto& [name, value] : record.metrics) metrics[name] = value;
  line["metrics"] = std::move(metrics);
  if (record.samples_per_s) line["samples_per_s"] = *record.samples_per_s;
  if (!record.ranks.empty()) {
    Json ranks = Json::array();
    for (const auto& r : record.ranks) {
      ranks.push_back(Json{{"rank", r.rank}, {"samples_per_s", r.samples_per_s}, {"wait_ms", r.wait_ms},
                           {"compute_ms", r.compute_ms}});
    }
    line["ranks"] = std::move(ranks);
  }
  return line.dump();
}

MetricsLog::MetricsLog(MetricsLogOptions options, const RunConfig& config)
    : options_(std::move(options)), started_(std::chrono::steady_clock::now()) {
  if (!is_rank_zero() || options_.path().empty()) return;
  auto files = std::make_unique<Files>();
  files->jsonl = open_file(options_.path(), options_.append(), "metrics log");
  const bool csv_existed = options_.append() && ::access(options_.csv_path().c_str(), F_OK) == 0;
  if (!options_.csv_path().empty()) files->csv = open_file(options_.csv_path(), options_.append(), "CSV log");
  if (!options_.tensorboard_dir().empty()) {
    files->tensorboard = std::make_unique<TensorBoardWriter>(options_.tensorboard_dir());
  }
  files->started_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      elapsed_seconds();
  files_ = std::move(files);

  Json line;
  line["kind"] = "config";
  line["version"] = 1;
  line["time"] = 0.0;
  line["started_at"] = utc_now();
  line["world_size"] = dist::world_size_or_one();
  line["rankwise"] = RANKWISE_VERSION;
  Json values = Json::object();
  for (const auto& [key, value] : config) values[key] = to_json(value);
  line["config"] = std::move(values);
  files_->jsonl->append(line.dump() + "\n");
  if (!files_->csv) return;
  std::string rows = csv_existed ? "" : "kind,step,epoch,time,name,value\n";
  auto add_rows = [&rows](const Json& object, bool skip_own) {
    for (const auto& item : object.items()) {
      const Json& value = item.value();
      if (skip_own && (item.key() == "kind" || item.key() == "config")) continue;
      rows += "config,,,0," + csv_field(item.key()) + "," +
              csv_field(value.is_string() ? value.get<std::string>() : value.dump()) + "\n";
    }
  };
  add_rows(line, /*skip_own=*/true);
  add_rows(line["config"], /*skip_own=*/false);
  files_->csv->append(rows);
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::write(const LogRecord& record) {
  if (!files_) return;
  const double time = elapsed_seconds();
  files_->jsonl->append(format_record(record, time) + "\n");
  if (files_->tensorboard) {
    files_->tensorboard->add_scalars(record.step, tensorboard_scalars(record), files_->started_unix + time);
  }
  if (!files_->csv) return;
  const std::string prefix = fmt::format("{},{},{},{},", csv_field(record.kind), record.step, record.epoch, time);
  std::string rows;
  for (const auto& [name, value] : record.metrics) rows += prefix + csv_field(name) + "," + csv_number(value) + "\n";
  if (record.samples_per_s) rows += prefix + "samples_per_s," + csv_number(*record.samples_per_s) + "\n";
  if (!rows.empty()) files_->csv->append(rows);
}

void MetricsLog::log_step(int64_t step, int64_t epoch, const MetricValues& metrics,
                          std::optional<double> samples_per_s, std::vector<RankStats> ranks) {
  write(LogRecord{"step", step, epoch, metrics, samples_per_s, std::move(ranks)});
}

void MetricsLog::log_epoch(int64_t epoch, int64_t step, const MetricValues& metrics,
                           std::optional<double> samples_per_s) {
  write(LogRecord{"epoch", step, epoch, metrics, samples_per_s, {}});
}

bool MetricsLog::writing() const { return files_ != nullptr; }

const std::string& MetricsLog::path() const { return options_.path(); }

double MetricsLog::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

}  // namespace rankwise::monitor
