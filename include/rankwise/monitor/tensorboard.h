#pragma once
/// \file tensorboard.h
/// TensorBoard event files written while training runs: rank 0 appends each
/// scalar as it is logged, so `tensorboard --logdir DIR` shows the curves of
/// a run that is still going (and of one that was killed).
///
/// \code
///   rankwise::monitor::TensorBoardWriter board("runs/mnist");   // every rank constructs it
///   board.add_scalar("loss", reduced_loss, step);               // rank 0 writes
///   board.add_scalars(step, {{"loss", loss}, {"lr", lr}});      // one event, two values
/// \endcode
///
/// The file is `DIR/events.out.tfevents.<unix seconds>.<host name>.<pid>`
/// (TensorBoard's naming), a sequence of TFRecords (uint64 length, masked
/// CRC-32C of the length, data, masked CRC-32C of the data), each an Event
/// of TensorBoard's event.proto: first the file_version event
/// ("brain.Event:2"), then one Event{wall_time, step, summary{value{tag,
/// simple_value}...}} per add_scalar / add_scalars call. Each record is one
/// write(2) of the whole record, made before the call returns (no buffering),
/// so TensorBoard reads every value while the run goes on and a run killed at
/// any point leaves only whole records. Values are stored as float (TensorBoard's
/// simple_value).
///
/// MetricsLog writes one of these itself when given
/// MetricsLogOptions::tensorboard_dir (docs/monitoring.md).
///
/// Every rank runs the whole program, so every rank constructs the writer and
/// calls its methods; only rank 0 (rankwise::is_rank_zero()) creates and
/// writes the file, the others do nothing. The writer never communicates:
/// values must already be reduced over ranks.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rankwise::monitor {

/// Writes scalars to a TensorBoard event file, live (see the file comment).
class TensorBoardWriter {
 public:
  /// Local (no communication; every rank constructs it). On rank 0: creates
  /// `directory` (and missing parents), a new event file in it, and writes
  /// the file_version event. Throws ConfigError on rank 0 when the directory
  /// is empty or the directory or file cannot be created (naming the
  /// directory and the system's reason); the launcher then stops the other
  /// ranks. An existing event file is never touched: a resumed run writes a
  /// new file beside it, and TensorBoard shows both as one run.
  explicit TensorBoardWriter(std::string directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Appends one Event with the scalar `tag` = `value` at `step` (rank 0; a
  /// no-op elsewhere). `wall_time`: seconds since the Unix epoch, default
  /// now. Local. A write that fails (disk full) is not reported, and the
  /// torn record is cut off, so later records stay readable: the writer
  /// never stops training.
  void add_scalar(const std::string& tag, double value, int64_t step,
                  std::optional<double> wall_time = std::nullopt);
  /// Appends one Event holding every (tag, value) of `values` at `step`, in
  /// this order (nothing when `values` is empty); otherwise as add_scalar.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                   std::optional<double> wall_time = std::nullopt);

  /// True on the rank that writes (rank 0).
  bool writing() const;
  /// The directory given.
  const std::string& directory() const;
  /// The event file (rank 0; empty on the other ranks).
  const std::string& path() const;

 private:
  void append(const std::string& record);

  std::string directory_;
  std::string path_;
  int fd_ = -1;        // -1 on ranks other than 0
  uint64_t size_ = 0;  // bytes of whole records in the file
};

}  // namespace rankwise::monitor
