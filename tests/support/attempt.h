#pragma once
// Records of one launcher attempt, made by hand for the launch unit tests
// (root cause, failure summary): a worker and the error file it wrote.
#include <chrono>
#include <string>

#include "launch/workers/summary.h"
#include "wire/error_file.h"

namespace rankwise::test {

/// Worker `rank` of an attempt that started at `t0`, ended `end_ms` later in `state`.
inline launch::workers::WorkerRecord worker(int rank, launch::workers::WorkerState state,
                                            std::chrono::steady_clock::time_point t0, int end_ms) {
  launch::workers::WorkerRecord w;
  w.rank = rank;
  w.local_rank = rank;
  w.pid = 100 + rank;
  w.state = state;
  w.exit_code = state == launch::workers::WorkerState::kSucceeded ? 0 : 1;
  w.start = t0;
  w.end = t0 + std::chrono::milliseconds(end_ms);
  w.error_file = "/tmp/error_rank" + std::to_string(rank) + ".json";
  return w;
}

/// The error a worker's error file holds, raised at `at`.
inline wire::WorkerError error(const std::string& message, bool secondary,
                               std::chrono::steady_clock::time_point at) {
  wire::WorkerError e;
  e.path = "/tmp/error.json";
  e.message = message;
  e.secondary = secondary;
  e.time = at;
  return e;
}

}  // namespace rankwise::test
