#include "launch/hang_watchdog.h"

#include <cxxabi.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "detail/hang_diagnosis.h"
#include "detail/join.h"
#include "detail/stack_dump.h"

namespace rankwise {
namespace launch {

RankActivity activity_of(const RankView& v, int64_t now_ms) {
  if (v.ended || (v.progress && v.progress->exited)) return RankActivity::kEnded;
  if (v.stopped) return RankActivity::kStopped;
  if (!v.progress) return RankActivity::kWorking;
  if (detail::heartbeat_stale(*v.progress, now_ms)) return RankActivity::kStopped;
  if (v.progress->entered > 0 && v.progress->ended_ms == 0) return RankActivity::kInCollective;
  return RankActivity::kWorking;
}

bool HangWatchdog::observe(const std::vector<RankView>& ranks,
                           std::chrono::steady_clock::time_point now, int64_t now_ms) {
  bool all_blocked = !ranks.empty();
  bool any_waiting = false;
  std::vector<uint64_t> completed;
  completed.reserve(ranks.size());
  for (const RankView& v : ranks) {
    const RankActivity a = activity_of(v, now_ms);
    if (a == RankActivity::kWorking) all_blocked = false;
    if (a == RankActivity::kInCollective) any_waiting = true;
    completed.push_back(v.progress ? v.progress->completed : 0);
  }
  const bool progressed = completed != completed_;
  completed_ = std::move(completed);
  if (!all_blocked || !any_waiting) {
    blocked_since_.reset();
    return false;
  }
  if (progressed || !blocked_since_) blocked_since_ = now;
  return now - *blocked_since_ >= timeout_;
}

std::vector<int> ranks_holding_up(const std::vector<RankView>& ranks, int64_t now_ms) {
  std::vector<int> stopped, ended, all;
  std::optional<uint64_t> lowest;
  for (const RankView& v : ranks) {
    all.push_back(v.rank);
    switch (activity_of(v, now_ms)) {
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
    if (activity_of(v, now_ms) != RankActivity::kInCollective) continue;
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
  if (text.size() > 200) text = text.substr(0, 197) + "...";
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

std::string format_hang_report(const std::vector<RankView>& ranks, int64_t now_ms,
                               std::chrono::milliseconds timeout) {
  std::string out = fmt::format(
      "rankwise-run: hang: for {:.1f} s no rank completed a collective and none was working "
      "outside one (--hang-timeout {:g}):\n",
      timeout.count() / 1000.0, timeout.count() / 1000.0);
  for (const RankView& v : ranks) {
    const RankActivity a = activity_of(v, now_ms);
    const std::string pid =
        v.progress ? fmt::format("pid {}{}", v.progress->pid,
                                 v.progress->host.empty() ? "" : " on " + v.progress->host)
                   : std::string(v.local ? "local" : "remote");
    out += fmt::format("rankwise-run:   rank {} ({}, {}): {}\n", v.rank, pid, state_word(v, a),
                       detail::describe_progress(v.progress, now_ms));
  }
  const std::vector<int> culprits = ranks_holding_up(ranks, now_ms);
  const bool everyone = culprits.size() == ranks.size() && ranks.size() > 1;
  out += everyone ? "rankwise-run: every rank waits inside a collective that no other rank "
                    "completes: a deadlock (e.g. ranks calling different collectives; "
                    "RANKWISE_DEBUG=detail names them)\n"
                  : fmt::format("rankwise-run: {} held the others up\n",
                                detail::rank_list(culprits));
  return out;
}

std::string format_stack_dump(const std::string& raw, const std::string& prefix) {
  std::string out;
  std::istringstream in(raw);
  std::string line;
  while (std::getline(in, line)) {
    if (line == detail::kStackDumpEnd) continue;
    const bool frame = !line.empty() && line.back() == ']' && line.find('(') != std::string::npos;
    out += prefix + (frame ? "    " + format_frame(line) : line) + "\n";
  }
  return out;
}

}  // namespace launch
}  // namespace rankwise
