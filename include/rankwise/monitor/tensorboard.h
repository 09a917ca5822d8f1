#pragma once
/// \file tensorboard.h
/// TensorBoard event files written live: `DIR/events.out.tfevents.<secs>.<host>.<pid>`,
/// TFRecords of Events (float scalars), each record one unbuffered write(2), so TensorBoard
/// reads a running or killed run. Every rank constructs the writer and calls it; only rank 0
/// writes. It never communicates: values must already be reduced over ranks.
/// See docs/monitoring.md#live-tensorboard.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rankwise::monitor {

class RecordFile;

/// Writes scalars to a TensorBoard event file, live (see the file comment).
class TensorBoardWriter {
 public:
  /// Local (every rank constructs it). On rank 0: creates `directory` (and parents) and a new
  /// event file in it (never touching an existing one), and writes the file_version event.
  /// Throws ConfigError on rank 0 when the directory is empty or it or the file cannot be
  /// created (naming the directory and the system's reason).
  explicit TensorBoardWriter(std::string directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Appends one Event with the scalar `tag` = `value` at `step` (rank 0; a
  /// no-op elsewhere). `wall_time`: seconds since the Unix epoch, default
  /// now. Local. A write that fails (disk full, `ulimit -f`) cuts the torn
  /// record off, warns once on stderr naming the file and the reason, and
  /// ends the writing (later calls do nothing); training goes on.
  void add_scalar(const std::string& tag, double value, int64_t step,
                  std::optional<double> wall_time = std::nullopt);
  /// Appends one Event holding every (tag, value) of `values` at `step`, in
  /// this order (nothing when `values` is empty); otherwise as add_scalar.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                   std::optional<double> wall_time = std::nullopt);

  /// True on the rank that writes (rank 0), until a write failed.
  bool writing() const;
  /// The directory given.
  const std::string& directory() const;
  /// The event file (rank 0; empty on the other ranks).
  const std::string& path() const;

 private:
  std::string directory_;
  std::string path_;
  std::unique_ptr<RecordFile> file_;  // null on ranks other than 0
};

}  // namespace rankwise::monitor
