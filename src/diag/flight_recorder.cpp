#include "rankwise/diag/flight_recorder.h"

#include "core/check.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "util/text.h"
#include "rankwise/error.h"

namespace rankwise::diag {
namespace {

int64_t unix_us(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

const char* state_name(CollectiveRecord::State state) {
  switch (state) {
    case CollectiveRecord::State::kEntered: return "entered";
    case CollectiveRecord::State::kCompleted: return "completed";
    case CollectiveRecord::State::kFailed: return "failed";
  }
  return "unknown";
}

}  // namespace

std::string short_call_site(const std::string& file, uint32_t line) {
  const auto slash = file.find_last_of('/');
  return fmt::format("{}:{}", (slash == std::string::npos ? file : file.substr(slash + 1)), line);
}

std::string describe(const CollectiveRecord& r) {
  std::string text = r.operation;
  if (!r.name.empty()) text += " '" + r.name + "'";
  text += fmt::format(" #{}", r.sequence);
  std::vector<std::string> details;
  if (!r.dtype.empty()) details.push_back(r.dtype + " [" + util::join_strings(r.sizes) + "]");
  if (!r.reduce_op.empty()) details.push_back(r.reduce_op);
  if (r.root >= 0) details.push_back(fmt::format("root {}", r.root));
  if (!details.empty()) text += " (" + util::join_strings(details) + ")";
  if (!r.file.empty()) text += " at " + short_call_site(r.file, r.line);
  return text;
}

FlightRecorder::FlightRecorder(std::size_t capacity) : ring_(capacity) {}

uint64_t FlightRecorder::enter(CollectiveRecord record) {
  record.enqueued = record.ended = std::chrono::system_clock::now();
  record.state = CollectiveRecord::State::kEntered;
  std::lock_guard<std::mutex> lock(mutex_);
  record.sequence = next_++;
  last_entered_ = record;
  if (!ring_.empty()) ring_[record.sequence % ring_.size()] = std::move(record);
  return last_entered_.sequence;
}

void FlightRecorder::end(uint64_t sequence, bool ok) {
  const auto now = std::chrono::system_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  const auto state = ok ? CollectiveRecord::State::kCompleted : CollectiveRecord::State::kFailed;
  if (ok && sequence > last_completed_) last_completed_ = sequence;
  if (last_entered_.sequence == sequence) {
    last_entered_.state = state;
    last_entered_.ended = now;
  }
  if (ring_.empty()) return;
  auto& slot = ring_[sequence % ring_.size()];
  if (slot.sequence != sequence) return;  // overwritten meanwhile
  slot.state = state;
  slot.ended = now;
}

std::vector<CollectiveRecord> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveRecord> out;
  const uint64_t recorded = next_ - 1;
  const uint64_t count = std::min<uint64_t>(recorded, ring_.size());
  for (uint64_t s = recorded - count + 1; s <= recorded; ++s)
    out.push_back(ring_[s % ring_.size()]);
  return out;
}

CollectiveRecord FlightRecorder::last_entered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_entered_;
}

uint64_t FlightRecorder::last_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_completed_;
}

std::string FlightRecorder::to_json(int rank, int world_size) const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& r : this->entries()) {
    entries.push_back({{"sequence", r.sequence},
                       {"operation", r.operation},
                       {"dtype", r.dtype},
                       {"sizes", r.sizes},
                       {"reduce_op", r.reduce_op},
                       {"root", r.root},
                       {"name", r.name},
                       {"file", r.file},
                       {"line", r.line},
                       {"state", state_name(r.state)},
                       {"enqueued_us", unix_us(r.enqueued)},
                       {"ended_us", unix_us(r.ended)}});
  }
  nlohmann::json doc = {{"rank", rank},
                        {"world_size", world_size},
                        {"capacity", capacity()},
                        {"entries", std::move(entries)}};
  return doc.dump(1);
}

void FlightRecorder::dump(const std::string& path, int rank, int world_size) const {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(p);
  out << to_json(rank, world_size) << "\n";
  out.close();
  if (!out) {
    core::raise<Error>(
        "rank {}/{}: cannot write the flight recorder to {}; check RANKWISE_FLIGHT_RECORDER_DIR",
        rank, world_size, path);
  }
}

}  // namespace rankwise::diag
