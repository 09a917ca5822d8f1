#include "wire/error_file.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>

namespace rankwise::wire {

namespace {

using SteadyClock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;

SteadyClock::time_point to_steady(WallClock::time_point wall) {
  const auto steady_now = SteadyClock::now();
  const auto wall_now = WallClock::now();
  return steady_now + std::chrono::duration_cast<SteadyClock::duration>(wall - wall_now);
}

// A timestamp in `unit`s since the epoch, as a JSON number or string (torchelastic's).
template <typename Unit>
std::optional<WallClock::time_point> wall_time(const nlohmann::json& value) {
  long long count = 0;
  if (value.is_number_integer()) {
    count = value.get<long long>();
  } else if (value.is_string()) {
    try {
      count = std::stoll(value.get<std::string>());
    } catch (const std::exception&) {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  return WallClock::time_point(std::chrono::duration_cast<WallClock::duration>(Unit(count)));
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

std::string encode_worker_error(const std::string& message, int rank, bool secondary,
                                std::chrono::system_clock::time_point when) {
  const auto since_epoch = when.time_since_epoch();
  const nlohmann::json record = {
      {"message", message},
      {"rank", rank},
      {"secondary", secondary},
      {"timestamp", std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count()},
      {"timestamp_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count()}};
  return record.dump();
}

WorkerError parse_worker_error(const std::string& text, SteadyClock::time_point written) {
  WorkerError e;
  e.message = trimmed(text);
  e.time = written;
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("message")) return e;
  nlohmann::json message = json["message"];
  std::optional<WallClock::time_point> when;
  if (message.is_object()) {  // torchelastic's layout
    if (message.contains("extraInfo") && message["extraInfo"].is_object() &&
        message["extraInfo"].contains("timestamp")) {
      when = wall_time<std::chrono::seconds>(message["extraInfo"]["timestamp"]);
    }
    message = message.contains("message") ? message["message"] : nlohmann::json();
  }
  if (!message.is_string()) return e;
  e.message = trimmed(message.get<std::string>());
  if (json.contains("secondary") && json["secondary"].is_boolean()) {
    e.secondary = json["secondary"].get<bool>();
  }
  if (json.contains("rank") && json["rank"].is_number_integer()) e.rank = json["rank"].get<int>();
  if (json.contains("timestamp_ns")) {
    when = wall_time<std::chrono::nanoseconds>(json["timestamp_ns"]);
  }
  if (!when && json.contains("timestamp")) {
    when = wall_time<std::chrono::seconds>(json["timestamp"]);
  }
  if (when) e.time = to_steady(*when);
  return e;
}

std::optional<WorkerError> read_worker_error(const std::string& path, std::size_t max_bytes) {
  struct stat st {};
  std::ifstream in(path, std::ios::binary);
  if (!in || ::stat(path.c_str(), &st) != 0) return std::nullopt;
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max_bytes + 1));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_bytes) {
    text.resize(max_bytes);
    text += "\n[... truncated]";
  }
  const auto mtime = WallClock::time_point(std::chrono::duration_cast<WallClock::duration>(
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  WorkerError e = parse_worker_error(text, to_steady(mtime));
  e.path = path;
  return e;
}

std::optional<int> echoed_rank(const std::string& message) {
  static const std::regex phrase(R"(\((?:raised on rank (\d+), which |rank (\d+)'s error, raised on rank ))");
  std::smatch m;
  if (!std::regex_search(message, m, phrase)) return std::nullopt;
  return std::stoi(m[1].matched ? m[1].str() : m[2].str());
}

}  // namespace rankwise::wire
