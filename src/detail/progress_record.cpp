#include "detail/progress_record.h"

#include <nlohmann/json.hpp>

#include <chrono>

namespace rankwise {
namespace detail {

std::string job_prefix(const std::string& job_key) {
  return "rankwise/" + (job_key.empty() ? "" : job_key + "/");
}

std::string attempt_prefix(int restart_count, const std::string& job_key) {
  return job_prefix(job_key) + std::to_string(restart_count);
}

std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }

std::string encode_progress(const ProgressRecord& r) {
  return nlohmann::json{{"entered", r.entered},       {"completed", r.completed},
                        {"failed", r.failed},         {"last", r.last},
                        {"entered_ms", r.entered_ms}, {"ended_ms", r.ended_ms},
                        {"heartbeat_ms", r.heartbeat_ms}, {"exited", r.exited},
                        {"pid", r.pid},               {"host", r.host},
                        {"stack_dump", r.stack_dump}}
      .dump();
}

std::optional<ProgressRecord> decode_progress(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  try {
    ProgressRecord r;
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
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace detail
}  // namespace rankwise
