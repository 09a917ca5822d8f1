#include "launch/summary.h"

#include <signal.h>

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <sstream>

namespace rankwise {
namespace launch {

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
  if (w.term_signal != 0) {
    return fmt::format("was killed by {} (signal {})", signal_name(w.term_signal), w.term_signal);
  }
  return fmt::format("exited with code {}", w.exit_code);
}

std::string read_error_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max_bytes + 1));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_bytes) {
    text.resize(max_bytes);
    text += "\n[... truncated]";
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void append_indented(std::string& out, const std::string& text, const char* indent) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += fmt::format("{}{}\n", indent, line);
}
}  // namespace

std::string format_failure_summary(const FailureReport& r) {
  const WorkerRecord& w = r.root_cause;
  std::string out;
  out += "rankwise-run: ================ job failed ================\n";
  out += fmt::format("rankwise-run: root cause (first failure): rank {} (local rank {}) on host {} "
                     "(node {}) {}\n",
                     w.rank, w.local_rank, r.host, r.node_rank, describe_exit(w));
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
  if (!r.root_error_file_text.empty()) {
    out += fmt::format("  error file ({}):\n", w.error_file);
    append_indented(out, r.root_error_file_text, "    ");
  }
  if (r.root_stderr_tail.empty()) {
    out += "  last lines of stderr: (none)\n";
  } else {
    out += fmt::format("  last {} lines of stderr:\n", r.root_stderr_tail.size());
    for (const auto& line : r.root_stderr_tail) out += fmt::format("    {}\n", line);
  }
  bool header = false;
  for (const auto& o : r.workers) {
    if (o.rank == w.rank) continue;
    if (!header) out += "  other local ranks:\n";
    header = true;
    std::string fate;
    switch (o.state) {
      case WorkerState::kSucceeded: fate = "succeeded"; break;
      case WorkerState::kTerminated:
        fate = o.term_signal != 0 ? fmt::format("terminated ({})", signal_name(o.term_signal))
                                  : fmt::format("terminated (exit code {})", o.exit_code);
        break;
      case WorkerState::kFailed: fate = fmt::format("failed later: {}", describe_exit(o)); break;
      case WorkerState::kRunning: fate = "still running"; break;
    }
    out += fmt::format("    rank {} (pid {}): {}\n", o.rank, o.pid, fate);
  }
  out += "rankwise-run: ==========================================\n";
  return out;
}

}  // namespace launch
}  // namespace rankwise
