#pragma once
/// \file output_merger.h
/// Merges the stdout and stderr of every local worker into the launcher's own.
/// Each write(2) carries whole tagged lines only (all the lines completed by
/// one read from a worker's pipe, in one batch), so lines of different ranks
/// never mix and a busy job costs one write per read, not one per line.
///
/// On a terminal (MergerOptions::terminal), a worker's stdout line that it
/// rewrites with '\r' (a progress bar) is also shown before it ends, in
/// place: the last such line stays at the bottom, rewritten as it changes,
/// and is cleared and redrawn below any whole lines printed meanwhile. One
/// line at the bottom, whichever worker updated it last (rankwise::monitor::
/// Progress draws from rank 0 only). Elsewhere (a pipe, a file) only whole
/// lines are written, so a bar yields its state when its line ends.

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "launch/output/line_assembler.h"

namespace rankwise::launch::output {

/// Which stream of a worker.
enum class Stream { kStdout = 0, kStderr = 1 };

/// Writes all of `data` to `fd`, retrying on EINTR, partial writes and EAGAIN.
/// Gives up silently when the reader is gone (EPIPE): the workers keep running.
void write_all(int fd, std::string_view data);

/// How merged output is presented.
struct MergerOptions {
  std::vector<std::string> tags;  ///< tag per local worker ("" when tagging is off)
  std::vector<int> ranks;         ///< global rank per local worker
  /// Per local worker, the streams shown (bits of console_streams.h); missing
  /// entries: both. The stderr tail and the log files keep every line.
  std::vector<unsigned> console;
  bool group_by_rank = false;     ///< hold lines until flush_groups()
  int stdout_fd = 1;              ///< where merged stdout goes
  int stderr_fd = 2;              ///< where merged stderr goes
  /// Raw copies per local worker: {stdout fd, stderr fd}, -1 for none.
  std::vector<std::pair<int, int>> log_fds;
  /// stdout_fd (and stderr_fd) is a terminal: show '\r'-rewritten lines in place.
  bool terminal = false;
};

/// Line assembly, tagging and routing for one attempt's local workers.
class OutputMerger {
 public:
  /// Lines of stderr kept per worker for the failure summary.
  static constexpr std::size_t kTailLines = 10;

  explicit OutputMerger(MergerOptions options);

  /// Bytes read from a worker's pipe.
  void on_data(std::size_t worker, Stream stream, const char* data, std::size_t n);
  /// The pipe reached end of file: emits an unterminated last line.
  void on_eof(std::size_t worker, Stream stream);
  /// With group_by_rank: prints every held line, rank by rank. No-op otherwise.
  void flush_groups();
  /// The last kTailLines lines the worker wrote to stderr (untagged).
  const std::deque<std::string>& stderr_tail(std::size_t worker) const { return tails_[worker]; }
  /// Whether the worker's '\r'-rewritten stdout lines are shown in place: a
  /// terminal, the worker's stdout on the console, no --group-by-rank. The
  /// worker learns it from RANKWISE_STDOUT_IS_TTY (kStdoutIsTtyVariable).
  bool shows_in_place(std::size_t worker) const;
  /// Writes the launcher's own `text` (whole lines) to `fd` between the
  /// workers' lines: pending lines first, and the in-place line, if one is
  /// shown, cleared before and redrawn after, so that a message never lands
  /// on the end of a progress bar.
  void write_own(int fd, std::string_view text);

 private:
  struct Held {
    Stream stream;
    std::string text;  // tagged line with its '\n'
  };
  void emit(std::size_t worker, Stream stream, std::string_view line, bool continued);
  /// Writes the batched lines of both streams, and the in-place line.
  void flush();
  /// After a read of `worker`'s stdout: the line to show in place now.
  void track_rewritten(std::size_t worker);

  MergerOptions options_;
  std::string pending_[2];  // batched tagged lines per stream (stdout, stderr)
  std::vector<LineAssembler> assemblers_;  // 2 per worker
  std::vector<std::deque<std::string>> tails_;
  std::vector<std::vector<Held>> held_;
  std::string in_place_;          // tagged line shown in place ("" none)
  std::size_t in_place_worker_ = 0;
  bool in_place_shown_ = false;   // the terminal's last line is in_place_, unterminated
  bool in_place_changed_ = false;
};

/// The variable that tells a worker whether its stdout reaches a terminal
/// through the launcher ("1" or "0"; read by rankwise::monitor::stdout_is_terminal()).
constexpr const char* kStdoutIsTtyVariable = "RANKWISE_STDOUT_IS_TTY";

}  // namespace rankwise::launch::output
