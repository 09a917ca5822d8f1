#include "launch/workers/summary.h"

#include <signal.h>

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "launch/output/output_merger.h"
#include "launch/output/say.h"
#include "wire/error_file.h"

namespace rankwise::launch::workers {

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return fmt::format("signal {}", sig);
  }
}

std::string describe_exit(const WorkerRecord& w) {
  if (w.out_of_memory) {
    return fmt::format("was killed by SIGKILL (signal {}) from the kernel's out-of-memory killer "
                       "(its memory cgroup's count of such kills rose meanwhile): give the job more memory, or "
                       "use less per rank (fewer ranks per node, smaller batches, --strategy fsdp)",
                       SIGKILL);
  }
  if (w.term_signal != 0) {
    return fmt::format("was killed by {} (signal {})", signal_name(w.term_signal), w.term_signal);
  }
  return fmt::format("exited with code {}", w.exit_code);
}

std::string describe_root_cause(const WorkerRecord& w) {
  if (!w.left_early.empty()) return w.left_early;
  if (w.state == WorkerState::kRunning) {  // a multi-node job's early report
    if (!w.hang_role.empty()) {
      return fmt::format("{}{}; the launcher is stopping it", w.hang_role,
                         w.was_stopped ? " (it was stopped: SIGSTOP or a debugger)" : "");
    }
    return "reported an error; the launcher is stopping it";
  }
  if (w.state != WorkerState::kTerminated) return describe_exit(w);
  const std::string how = w.term_signal != 0 ? signal_name(w.term_signal)
                                             : fmt::format("exit code {}", w.exit_code);
  if (!w.hang_role.empty()) {
    return fmt::format("{}{}, then was stopped by the launcher ({})", w.hang_role,
                       w.was_stopped ? " (it was stopped: SIGSTOP or a debugger)" : "", how);
  }
  return fmt::format("reported an error, then was stopped by the launcher ({})", how);
}

std::string kept_error_file(const std::string& log_dir, int attempt, int rank) {
  return fmt::format("{}/attempt_{}/error_rank{}.json", log_dir, attempt, rank);
}

std::string root_cause_headline(const WorkerRecord& w, const std::string& host, int node_rank) {
  return fmt::format("rank {} (local rank {}) on host {} (node {}) {}", w.rank, w.local_rank, host,
                     node_rank, describe_root_cause(w));
}

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  if (lines.empty()) lines.emplace_back();
  return lines;
}

// "label" then `text`, its further lines indented under the first.
void append_field(std::string& out, const char* label, const std::string& text) {
  const auto lines = split_lines(text);
  out += fmt::format("  {:<12}{}\n", label, lines[0]);
  for (std::size_t i = 1; i < lines.size(); ++i) out += fmt::format("  {:<12}{}\n", "", lines[i]);
}

// The stderr tail where run_main's "uncaught exception" line for `error`
// (whose message the summary shows once, as "error:") says "(the error
// above)" instead, without the message's further lines; when the tail begins
// inside them, they are left out.
std::vector<std::string> tail_without_message(const std::deque<std::string>& tail,
                                              const wire::WorkerError& error, int rank) {
  const auto uncaught = [&](const std::string& message) {
    return fmt::format(wire::kUncaughtExceptionFormat, rank, message);
  };
  const auto lines = split_lines(uncaught(error.message));
  const long n = static_cast<long>(lines.size()), size = static_cast<long>(tail.size());
  for (long start = 1 - n; start + n <= size; ++start) {
    bool match = true;
    for (long j = std::max(0L, -start); j < n && match; ++j) match = tail[start + j] == lines[j];
    if (!match) continue;
    std::vector<std::string> kept(tail.begin(), tail.begin() + std::max(0L, start));
    if (start >= 0) kept.push_back(uncaught("(the error above)"));
    kept.insert(kept.end(), tail.begin() + (start + n), tail.end());
    return kept;
  }
  return {tail.begin(), tail.end()};
}

// For a rank without an error file whose stderr shows Gloo's size check
// (a program without rankwise's report of it, dist/gloo_abort.h): what the
// check means; "" otherwise.
std::string gloo_size_check_note(const std::deque<std::string>& tail) {
  for (const std::string& line : tail) {
    if (line.find("op.preamble.length <= op.nbytes") == std::string::npos) continue;
    return "  meaning:    Gloo's size check failed (op.preamble.length <= op.nbytes): the ranks "
           "sent different sizes to the same collective; give every rank a tensor of the same "
           "shape and dtype there\n";
  }
  return "";
}

// What happened to a worker other than the root cause.
std::string fate_of(const WorkerRecord& o) {
  std::string fate;
  switch (o.state) {
    case WorkerState::kSucceeded: return "succeeded";
    case WorkerState::kRunning: return "still running";
    case WorkerState::kTerminated:
      fate = o.term_signal != 0 ? fmt::format("terminated ({})", signal_name(o.term_signal))
                                : fmt::format("terminated (exit code {})", o.exit_code);
      break;
    case WorkerState::kFailed: fate = fmt::format("failed: {}", describe_exit(o)); break;
  }
  if (o.was_stopped) fate += "; it was stopped (SIGSTOP or a debugger) when the job failed";
  if (o.error && o.error->secondary) {
    fate += " after a secondary error (a peer exited or closed the connection)";
  } else if (o.error) {
    const std::string first = split_lines(o.error->message)[0];
    fate += fmt::format(" after an error: {}",
                        first.size() > 120 ? fmt::format("{}...", first.substr(0, 117)) : first);
  }
  return fate;
}
}  // namespace

namespace {
constexpr const char* kSummaryTop = "rankwise-run: ================ job failed ================\n";
constexpr const char* kSummaryEnd = "rankwise-run: ==========================================\n";

// The summary of a node that stopped its workers for another node's failure.
std::string format_remote_failure(const FailureReport& r) {
  const rendezvous::NodeFailure& f = *r.remote;
  std::string out = kSummaryTop;
  out += fmt::format("rankwise-run: root cause (first failure): {}\n", f.root_cause);
  if (!f.error.empty()) append_field(out, "error:", f.error);
  if (f.silent) {
    out += fmt::format("  reported:   by nobody: node {}'s launcher could not say anything; this "
                       "node saw it stop answering\n",
                       f.node_rank);
    out += fmt::format("  this node:  node {} (host {}) stopped its workers when node {}'s "
                       "launcher stopped answering (attempt {})\n",
                       r.node_rank, r.host, f.node_rank, r.attempt);
  } else {
    out += fmt::format("  reported:   by node {}'s launcher; its summary has the details\n",
                       f.node_rank);
    out += fmt::format("  this node:  node {} (host {}) stopped its workers when node {}'s "
                       "failure was reported (attempt {})\n",
                       r.node_rank, r.host, f.node_rank, r.attempt);
  }
  out += "  local ranks:\n";
  for (const auto& o : r.workers) {
    out += fmt::format("    rank {} (pid {}): {}\n", o.rank, o.pid, fate_of(o));
  }
  out += kSummaryEnd;
  return out;
}
}  // namespace

std::string format_failure_summary(const FailureReport& r) {
  if (r.remote) return format_remote_failure(r);
  const WorkerRecord& w = r.root_cause;
  std::string out = kSummaryTop;
  out += fmt::format("rankwise-run: root cause (first failure): {}\n",
                     root_cause_headline(w, r.host, r.node_rank));
  out += fmt::format("  rank:       {} of world size {}\n", w.rank, r.world_size);
  out += fmt::format("  local rank: {}\n", w.local_rank);
  out += fmt::format("  host:       {} (node {})\n", r.host, r.node_rank);
  out += fmt::format("  pid:        {}\n", w.pid);
  if (w.term_signal != 0) {
    out += fmt::format("  signal:     {} ({})\n", signal_name(w.term_signal), w.term_signal);
  } else {
    out += fmt::format("  exit code:  {}\n", w.exit_code);
  }
  out += fmt::format("  elapsed:    {:.2f} s after its start (attempt {})\n",
                     seconds_between(w.start, w.end), r.attempt);
  if (!r.hang.empty()) {
    out += fmt::format("  hang:       {} (see the hang report above); the launcher stopped the "
                       "job\n", r.hang);
  }
  std::vector<std::string> tail(r.root_stderr_tail.begin(), r.root_stderr_tail.end());
  if (w.error) {
    append_field(out, "error:", w.error->message.empty() ? "(empty)" : w.error->message);
    const double written = seconds_between(w.start, w.error->time);
    if (r.error_files_kept) {
      out += fmt::format("  error file: {} (written {:.2f} s after its start)\n", w.error->path,
                         written);
    } else {  // its path would name a file that is gone
      out += fmt::format("  error file: removed when rankwise-run exits (written {:.2f} s after "
                         "its start); give --log-dir DIR to keep it as {}\n",
                         written, kept_error_file("DIR", r.attempt, w.rank));
    }
    if (w.error->secondary) {
      out += "  note:       this error only says that a peer exited or closed the connection; "
             "the first error is on another rank: see its output (on another node, that "
             "node's summary)\n";
    }
    tail = tail_without_message(r.root_stderr_tail, *w.error, w.error->rank.value_or(w.rank));
  } else {
    out += gloo_size_check_note(r.root_stderr_tail);
  }
  if (!w.left_early.empty()) {
    out += "  note:       it ended while the other ranks still needed it in their collectives; "
           "the errors that followed (\"a peer probably exited\") are secondary. Every rank "
           "must run every collective to the end: decide early stopping on every rank "
           "together (rankwise::dist::EarlyStopping)\n";
  }
  if (!r.root_stderr_tail.empty() && tail.empty()) {
    out += "  last lines of stderr: the error above\n";
  } else if (tail.empty()) {
    out += "  last lines of stderr: (none)\n";
  } else {
    out += fmt::format("  last {} lines of stderr:\n", tail.size());
    for (const auto& line : tail) out += fmt::format("    {}\n", line);
  }
  bool header = false;
  for (const auto& o : r.workers) {
    if (o.rank == w.rank) continue;
    if (!header) out += "  other local ranks:\n";
    header = true;
    out += fmt::format("    rank {} (pid {}): {}\n", o.rank, o.pid, fate_of(o));
  }
  out += kSummaryEnd;
  return out;
}

std::string one_line_cause(const FailureReport& r) {
  if (r.remote) return r.remote->root_cause;
  return fmt::format("rank {} {}", r.root_cause.rank, describe_root_cause(r.root_cause));
}

bool restart_after(const FailureReport& failure, const std::string& attempt, int restarts,
                   int max_restarts, const std::string& how) {
  if (restarts < max_restarts) {
    output::say(fmt::format("{} failed ({}); restarting ({}/{}){}", attempt, one_line_cause(failure),
                            restarts + 1, max_restarts, how));
    return true;
  }
  output::write_all(2, format_failure_summary(failure));
  if (max_restarts > 0) output::say(fmt::format("giving up after {} restarts", max_restarts));
  return false;
}

}  // namespace rankwise::launch::workers
