#pragma once
/// \file flight_recorder.h
/// The flight recorder: each rank keeps its last N collectives (of dist::ProcessGroup and DDP's
/// gradient buckets; always on, every backend) in a ring buffer, to explain a timeout, dead
/// peer or hang. Size: RANKWISE_FLIGHT_RECORDER_SIZE (default 2000; 0: off). On a collective's
/// TimeoutError or PeerError it is written as JSON to RANKWISE_FLIGHT_RECORDER_DIR/rank<R>.json
/// when that is set. See docs/hangs-and-debugging.md#what-rankwise-records.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <source_location>
#include <string>
#include <vector>

namespace rankwise::diag {

/// One collective as this rank saw it.
struct CollectiveRecord {
  /// What the collective is in its life.
  enum class State { kEntered, kCompleted, kFailed };

  /// 1-based number of the collective in this process group on this rank;
  /// ranks that call the same collectives in the same order agree on it.
  uint64_t sequence = 0;
  std::string operation;  ///< "all_reduce", "broadcast", "all_gather", "barrier", "monitored_barrier"
  std::string dtype;      ///< c10's name ("Float", "Long"), "" when it has no tensor
  std::vector<int64_t> sizes;  ///< the tensor's shape; empty when it has no tensor
  std::string reduce_op;  ///< "sum", "avg", "min", "max" for all_reduce, else ""
  int root = -1;          ///< broadcast's root, else -1
  /// monitored_barrier's name, or what one of rankwise's own collectives is
  /// for ("DistributedDataParallel step 10: ranks with inputs"), else "".
  std::string name;
  /// Every rank's call was compared before it ran (checked collectives);
  /// false for rankwise's own (DDP's buckets, FSDP's gathers) and unchecked ones.
  bool checked = false;
  std::string file;       ///< the caller's source file (std::source_location)
  uint32_t line = 0;      ///< the caller's line
  /// Wall-clock times (system_clock, so that ranks can be compared): when the
  /// call began, and when it completed or failed (equal to `enqueued` while
  /// it is still running).
  std::chrono::system_clock::time_point enqueued;
  std::chrono::system_clock::time_point ended;
  State state = State::kEntered;
};

/// "all_reduce #12 (Float [1024], sum) at train.cpp:88": a record as the
/// error messages name it (the file's last path component only).
std::string describe(const CollectiveRecord& record);

/// "train.cpp:88": the last path component of `file` and the line.
std::string short_call_site(const std::string& file, uint32_t line);

/// A ring buffer of the last `capacity` collectives of one process group.
/// Thread-safe (one mutex, held for a copy of a few fields per call).
class FlightRecorder {
 public:
  /// `capacity` 0 records nothing (sequence numbers still count).
  explicit FlightRecorder(std::size_t capacity);

  /// Records the start of a collective and returns its sequence number. Fills
  /// record.sequence, enqueued and state; the rest comes from the caller.
  uint64_t enter(CollectiveRecord record);
  /// Marks collective `sequence` completed (ok) or failed.
  void end(uint64_t sequence, bool ok);

  /// The recorded collectives, oldest first.
  std::vector<CollectiveRecord> entries() const;
  /// The last collective entered (sequence 0 when none yet).
  CollectiveRecord last_entered() const;
  /// Sequence number of the last collective that completed, 0 when none.
  uint64_t last_completed() const;
  std::size_t capacity() const { return ring_.size(); }

  /// The record as JSON: {"rank", "world_size", "capacity", "entries": [{
  /// "sequence", "operation", "dtype", "sizes", "reduce_op", "root", "name",
  /// "file", "line", "state", "enqueued_us", "ended_us"}]} (times in
  /// microseconds since the Unix epoch).
  std::string to_json(int rank, int world_size) const;
  /// Writes to_json() to `path` (creating its directory). Throws Error naming
  /// the path when it cannot be written.
  void dump(const std::string& path, int rank, int world_size) const;

 private:
  mutable std::mutex mutex_;
  std::vector<CollectiveRecord> ring_;
  uint64_t next_ = 1;
  uint64_t last_completed_ = 0;
  CollectiveRecord last_entered_;
};

}  // namespace rankwise::diag
