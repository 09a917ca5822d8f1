#pragma once
// One loop of attempts for every launch: meet the attempt's nodes, run it,
// then end the job, restart (counted against --max-restarts) or meet again.
// What differs between a job of a fixed node count (launcher.cpp) and an
// elastic one (elastic_agent.cpp) is an AttemptMembership.
#include <optional>
#include <string>

#include "launch/workers/worker_group.h"

namespace rankwise::launch {

class AttemptMembership {
 public:
  virtual ~AttemptMembership() = default;
  /// Meets the next attempt's nodes and returns its configuration; nullptr
  /// to meet again (an elastic round that could not start), or, with
  /// `exit_code` set, the job's end (a signal, the job ended meanwhile).
  virtual workers::AttemptConfig* meet(std::optional<int>& exit_code) = 0;
  /// After the attempt met last has run.
  virtual void attempt_ended() {}
  /// That attempt in messages ("attempt 2", "round 3"), and how a restart
  /// happens (" with every node", " in a new rendezvous round").
  virtual std::string attempt_name() const = 0;
  virtual std::string restart_how() const = 0;
  /// A failed attempt, before the restart decision: true when the next
  /// attempt is not a restart (a node waits to join an elastic job).
  virtual bool failed(const workers::FailureReport& failure) = 0;
  /// The launcher's exit code when the attempt succeeded, a signal stopped
  /// it, or it failed with no restart left (after its summary).
  virtual int succeeded() = 0;
  virtual int signaled(const workers::AttemptResult& result) = 0;
  virtual int gave_up(const workers::FailureReport& failure) = 0;
};

/// Runs attempts until the job ends, at most `max_restarts` of them counted
/// as restarts; returns the launcher's exit code.
int run_attempt_loop(AttemptMembership& membership, int max_restarts);

}  // namespace rankwise::launch
