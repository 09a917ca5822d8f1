#pragma once
/// \file output_merger.h
/// Merges the stdout and stderr of every local worker into the launcher's own.
/// Each write(2) carries whole tagged lines only (all the lines completed by
/// one read from a worker's pipe, in one batch), so lines of different ranks
/// never mix and a busy job costs one write per read, not one per line.

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "launch/line_assembler.h"

namespace rankwise {
namespace launch {

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

 private:
  struct Held {
    Stream stream;
    std::string text;  // tagged line with its '\n'
  };
  void emit(std::size_t worker, Stream stream, std::string_view line, bool continued);
  /// Writes the batched lines of both streams.
  void flush();

  MergerOptions options_;
  std::string pending_[2];  // batched tagged lines per stream (stdout, stderr)
  std::vector<LineAssembler> assemblers_;  // 2 per worker
  std::vector<std::deque<std::string>> tails_;
  std::vector<std::vector<Held>> held_;
};

}  // namespace launch
}  // namespace rankwise
