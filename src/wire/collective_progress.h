#pragma once
// Progress in the store: each rank publishes where it is in its collectives
// (the last entered and the last completed sequence number, what the last
// one was and where it was called, a heartbeat) under progress_key(rank) of
// the job's store, so that a rank whose collective times out can say which
// ranks never entered it, and the launcher can report a hang. Written by
// detail::CollectiveProgressPublisher (workers), read by the workers on a failure and
// by rankwise-run; shared by both, so it depends on nothing but JSON.
#include <cstdint>
#include <optional>
#include <string>

#include "wire/store_keys.h"

namespace rankwise::wire {

/// One rank's published progress. Times are Unix milliseconds.
struct CollectiveProgress {
  uint64_t entered = 0;     ///< sequence number of the last collective entered (0: none)
  uint64_t completed = 0;   ///< sequence number of the last one completed
  bool failed = false;      ///< the last one entered failed
  std::string last;         ///< rankwise::diag::describe() of the last one entered
  int64_t entered_ms = 0;   ///< when the last one was entered
  int64_t ended_ms = 0;     ///< when it completed or failed (0 while inside it)
  int64_t heartbeat_ms = 0; ///< when this record was written
  bool exited = false;      ///< the rank destroyed its process group (returned from main, ...)
  int pid = 0;
  std::string host;
  /// The rank answers detail::kStackDumpSignal with a dump of its threads'
  /// stacks (diag/stack_dump.h); rankwise-run sends it only then.
  bool stack_dump = false;

  // Heartbeat fields (monitor/step_stats.h; rankwise-run --monitor). Records
  // of releases without them decode with these defaults.
  int64_t step = -1;          ///< monitor::record_step() calls so far (-1: it was never called)
  double samples_per_s = 0;   ///< local samples per second over the last rate window (about 1 s)
  double step_ms = 0;         ///< wall time per step over that window (0: none measured yet)
  double wait_ms = 0;         ///< of which a collective was in flight (step_ms - wait_ms: compute)
  std::optional<double> loss;  ///< the last local loss given to record_step
  int64_t rss_bytes = 0;      ///< resident set size (/proc/self/statm; 0: unknown)
  std::string device;         ///< "cpu", "cuda:0", ... ("" unknown)
};

/// The record as one JSON object. The heartbeat fields are written only once
/// a step was recorded (step >= 0), the loss only when set.
std::string encode_progress(const CollectiveProgress& record);
/// nullopt when `text` is not a collective progress record. Tolerant of both older and
/// newer writers: missing heartbeat fields take their defaults, unknown
/// fields are ignored, a heartbeat field of the wrong type is left at its
/// default (the collective fields are required).
std::optional<CollectiveProgress> decode_progress(const std::string& text);

/// Milliseconds since the Unix epoch, now.
int64_t unix_ms_now();

/// The name every collective of DistributedDataParallel's own starts with
/// (src/parallel/ddp: "DistributedDataParallel step 3: gradients", ...).
constexpr const char* kDdpCollectivePrefix = "DistributedDataParallel ";

/// True when `record`'s last collective is one of DistributedDataParallel's
/// own (its description quotes a name starting with kDdpCollectivePrefix).
inline bool in_ddp_collective(const CollectiveProgress& record) {
  return record.last.find(std::string("'") + kDdpCollectivePrefix) != std::string::npos;
}

}  // namespace rankwise::wire
