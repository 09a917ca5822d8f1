#include "wire/collective_progress.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>

namespace rankwise::wire {

namespace {

std::string fmt_non_finite(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

std::optional<double> parse_non_finite(const std::string& text) {
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

}  // namespace

std::string encode_progress(const CollectiveProgress& r) {
  nlohmann::json j{{"entered", r.entered},       {"completed", r.completed},
                   {"failed", r.failed},         {"last", r.last},
                   {"entered_ms", r.entered_ms}, {"ended_ms", r.ended_ms},
                   {"heartbeat_ms", r.heartbeat_ms}, {"exited", r.exited},
                   {"pid", r.pid},               {"host", r.host},
                   {"stack_dump", r.stack_dump}};
  if (!r.device.empty()) j["device"] = r.device;
  if (r.rss_bytes > 0) j["rss_bytes"] = r.rss_bytes;
  if (r.step >= 0) {
    j["step"] = r.step;
    j["samples_per_s"] = r.samples_per_s;
    j["step_ms"] = r.step_ms;
    j["wait_ms"] = r.wait_ms;
    // JSON has no NaN or infinity: a diverged loss is sent as a string.
    if (r.loss) {
      j["loss"] = std::isfinite(*r.loss) ? nlohmann::json(*r.loss)
                                         : nlohmann::json(fmt_non_finite(*r.loss));
    }
  }
  return j.dump();
}

std::optional<CollectiveProgress> decode_progress(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  CollectiveProgress r;
  try {
    r.entered = j.at("entered").get<uint64_t>();
    r.completed = j.at("completed").get<uint64_t>();
    r.failed = j.at("failed").get<bool>();
    r.last = j.at("last").get<std::string>();
    r.entered_ms = j.at("entered_ms").get<int64_t>();
    r.ended_ms = j.at("ended_ms").get<int64_t>();
    r.heartbeat_ms = j.at("heartbeat_ms").get<int64_t>();
    r.exited = j.at("exited").get<bool>();
    r.pid = j.at("pid").get<int>();
    r.host = j.at("host").get<std::string>();
    r.stack_dump = j.value("stack_dump", false);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  // Heartbeat fields: each on its own, so one odd field loses only itself.
  auto optional_field = [&](const char* key, auto& field) {
    try {
      if (j.contains(key)) field = j.at(key).get<std::decay_t<decltype(field)>>();
    } catch (const nlohmann::json::exception&) {
    }
  };
  optional_field("step", r.step);
  optional_field("samples_per_s", r.samples_per_s);
  optional_field("step_ms", r.step_ms);
  optional_field("wait_ms", r.wait_ms);
  optional_field("rss_bytes", r.rss_bytes);
  optional_field("device", r.device);
  if (j.contains("loss")) {
    const auto& loss = j["loss"];
    if (loss.is_number()) r.loss = loss.get<double>();
    if (loss.is_string()) r.loss = parse_non_finite(loss.get<std::string>());
  }
  return r;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace rankwise::wire
