#include "launch/watch/hang_watchdog.h"

#include <cxxabi.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "launch/watch/collective_mismatch.h"
#include "wire/hang_diagnosis.h"
#include "util/text.h"
#include "wire/stack_dump_request.h"

namespace rankwise::launch::watch {

RankActivity activity_of(const RankView& v) {
  if (v.ended || (v.progress && v.progress->exited)) return RankActivity::kEnded;
  if (v.stopped || v.heartbeat_stale) return RankActivity::kStopped;
  if (!v.progress) return RankActivity::kWorking;
  if (v.progress->entered > 0 && v.progress->ended_ms == 0) return RankActivity::kInCollective;
  return RankActivity::kWorking;
}

std::vector<const wire::CollectiveProgress*> progress_of(const std::vector<RankView>& ranks) {
  std::vector<const wire::CollectiveProgress*> records;
  records.reserve(ranks.size());
  for (const RankView& v : ranks) records.push_back(v.progress ? &*v.progress : nullptr);
  return records;
}

bool HangWatchdog::observe(std::vector<RankView>& ranks,
                           std::chrono::steady_clock::time_point now) {
  stopped_since_.resize(ranks.size());
  heartbeats_.observe(progress_of(ranks), now);
  bool stopped_too_long = false;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    RankView& v = ranks[r];
    v.heartbeat_stale = heartbeats_.stale(static_cast<int>(r), now);
    if (activity_of(v) == RankActivity::kStopped) {
      if (!stopped_since_[r]) stopped_since_[r] = now;
      stopped_too_long = stopped_too_long || now - *stopped_since_[r] >= timeout_;
    } else {
      stopped_since_[r].reset();
    }
  }
  bool all_blocked = !ranks.empty();
  bool any_waiting = false;
  std::vector<uint64_t> completed;
  completed.reserve(ranks.size());
  for (const RankView& v : ranks) {
    const RankActivity a = activity_of(v);
    if (a == RankActivity::kWorking) all_blocked = false;
    if (a == RankActivity::kInCollective) any_waiting = true;
    completed.push_back(v.progress ? v.progress->completed : 0);
  }
  std::vector<uint64_t> entered;
  for (const RankView& v : ranks) entered.push_back(v.progress ? v.progress->entered : 0);
  const bool progressed = completed != completed_;
  const bool moved = progressed || entered != entered_;
  completed_ = std::move(completed);
  entered_ = std::move(entered);
  mismatched_ = mismatch_held(ranks, moved, now);
  if (mismatched_) return true;
  if (timeout_.count() <= 0) return false;
  if (ranks.size() > 1 && stopped_too_long) return true;
  if (!all_blocked || !any_waiting) {
    blocked_since_.reset();
    return false;
  }
  if (progressed || !blocked_since_) blocked_since_ = now;
  return now - *blocked_since_ >= timeout_;
}

// Whether every rank has waited in mismatched collectives, with no rank
// entering or completing one (`moved`), for the whole mismatch window.
bool HangWatchdog::mismatch_held(const std::vector<RankView>& ranks, bool moved,
                                 std::chrono::steady_clock::time_point now) {
  if (mismatch_window_.count() <= 0 || !find_mismatch(ranks)) {
    mismatch_since_.reset();
    return false;
  }
  if (moved || !mismatch_since_) mismatch_since_ = now;
  return now - *mismatch_since_ >= mismatch_window_;
}

std::vector<int> ranks_holding_up(const std::vector<RankView>& ranks) {
  std::vector<int> stopped, ended, all;
  std::optional<uint64_t> lowest;
  for (const RankView& v : ranks) {
    all.push_back(v.rank);
    switch (activity_of(v)) {
      case RankActivity::kStopped: stopped.push_back(v.rank); break;
      case RankActivity::kEnded: ended.push_back(v.rank); break;
      case RankActivity::kInCollective:
        lowest = std::min(lowest.value_or(v.progress->entered), v.progress->entered);
        break;
      case RankActivity::kWorking: break;
    }
  }
  if (!stopped.empty()) return stopped;
  if (!ended.empty()) return ended;
  std::vector<int> behind;
  bool all_same = true;
  for (const RankView& v : ranks) {
    if (activity_of(v) != RankActivity::kInCollective) continue;
    if (v.progress->entered == *lowest) {
      behind.push_back(v.rank);
    } else {
      all_same = false;
    }
  }
  return all_same ? all : behind;
}

namespace {

std::string state_word(const RankView& v, RankActivity a) {
  switch (a) {
    case RankActivity::kEnded: return "ended";
    case RankActivity::kStopped: return v.stopped ? "stopped" : "not responding";
    case RankActivity::kInCollective: return "waiting in a collective";
    case RankActivity::kWorking: break;
  }
  return "running";
}

std::string demangle(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), &std::free);
  std::string text = status == 0 && name ? std::string(name.get()) : symbol;
  if (text.size() > 200) text = fmt::format("{}...", text.substr(0, 197));
  return text;
}

// "object(symbol+0x1c) [0x...]" -> "symbol +0x1c in object"; other lines as they are.
std::string format_frame(const std::string& line) {
  const auto open = line.find('(');
  const auto close = line.find(')', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos) return line;
  std::string object = line.substr(0, open);
  const auto slash = object.rfind('/');
  if (slash != std::string::npos) object = object.substr(slash + 1);
  const std::string inside = line.substr(open + 1, close - open - 1);
  const auto plus = inside.rfind('+');
  const std::string symbol = plus == std::string::npos ? inside : inside.substr(0, plus);
  const std::string offset = plus == std::string::npos ? "" : inside.substr(plus);
  if (symbol.empty()) return fmt::format("?? {} in {}", offset, object);
  return fmt::format("{} {} in {}", demangle(symbol), offset, object);
}

}  // namespace

std::string format_rank_states(const std::vector<RankView>& ranks, int64_t now_ms) {
  std::string out;
  for (const RankView& v : ranks) {
    const RankActivity a = activity_of(v);
    const std::string pid =
        v.progress
            ? fmt::format("pid {}{}", v.progress->pid,
                          v.progress->host.empty() ? "" : fmt::format(" on {}", v.progress->host))
            : std::string(v.local ? "local" : "remote");
    out += fmt::format("rankwise-run:   rank {} ({}, {}): {}\n", v.rank, pid, state_word(v, a),
                       wire::describe_progress(v.progress, now_ms));
  }
  return out;
}

std::string format_hang_report(const std::vector<RankView>& ranks, int64_t now_ms,
                               std::chrono::milliseconds timeout) {
  std::string out = fmt::format(
      "rankwise-run: hang: no rank can make progress (for {:g} s every rank was blocked with no "
      "collective completed, or a rank was stopped; --hang-timeout):\n",
      timeout.count() / 1000.0);
  out += format_rank_states(ranks, now_ms);
  const std::vector<int> culprits = ranks_holding_up(ranks);
  out += is_deadlock(culprits, static_cast<int>(ranks.size())) ? "rankwise-run: every rank waits inside a collective that no other rank "
                    "completes: a deadlock (e.g. ranks calling different collectives; "
                    "RANKWISE_DEBUG=detail names them)\n"
                  : fmt::format("rankwise-run: {} held the others up\n",
                                util::rank_list(culprits));
  return out;
}

std::string format_stack_dump(const std::string& raw, const std::string& prefix) {
  std::string out;
  std::istringstream in(raw);
  std::string line;
  while (std::getline(in, line)) {
    if (line == wire::kStackDumpEnd) continue;
    const bool frame = !line.empty() && line.back() == ']' && line.find('(') != std::string::npos;
    out += frame ? fmt::format("{}    {}\n", prefix, format_frame(line))
                 : fmt::format("{}{}\n", prefix, line);
  }
  return out;
}

}  // namespace rankwise::launch::watch
