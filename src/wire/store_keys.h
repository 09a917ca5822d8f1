#pragma once
// The job's store as rankwise-run and its workers share it: the key layout
// and the environment through which the launcher hands the job key over.
// Launcher-only keys (nodes, rounds, launchers' heartbeats) are built on
// job_prefix() in launch/rendezvous/.
#include <string>

namespace rankwise::wire {

/// "rankwise/<job_key>/", or "rankwise/" without a job key: the root of
/// every key of one job in its store (the launchers' and the workers').
std::string job_prefix(const std::string& job_key);

/// The prefix of every key the workers of restart `restart_count` (attempt)
/// write in the job's store: "rankwise/<n>", or "rankwise/<job_key>/<n>"
/// with the secret job key rankwise-run hands its workers (RANKWISE_JOB_KEY),
/// so that one attempt never reads another's keys and a client of the store
/// that does not know the key cannot write keys the workers read.
std::string attempt_prefix(int restart_count, const std::string& job_key);

/// The environment variable through which rankwise-run hands its workers
/// the job key.
constexpr const char* kJobKeyVariable = "RANKWISE_JOB_KEY";

/// The store key (under the attempt's prefix) of rank `rank`'s record.
std::string progress_key(int rank);

}  // namespace rankwise::wire
