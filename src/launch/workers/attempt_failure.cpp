// A failed attempt: the failure report (root cause, every local worker's
// fate) and, on several nodes, one failure for the whole group: the first
// node's, told to the others through the store (group_failure.h).
#include <signal.h>

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "launch/workers/attempt_runner.h"
#include "launch/workers/root_cause.h"
#include "wire/error_file.h"

namespace rankwise::launch::workers {

// The attempt's failure as this node sees it (the workers' error files
// read now): its root cause, and what happened to every local worker.
FailureReport AttemptRunner::failure_report() {
  for (auto& w : workers_) w.error = wire::read_worker_error(w.error_file);
  const std::optional<std::size_t> first = pick_root_cause(workers_);
  std::size_t root = first.value_or(0);
  if (first && workers_[*first].error && workers_[*first].error->secondary) {
    const auto records = last_records();
    if (const auto early = pick_early_exit(workers_, first, records)) {
      root = *early;
      workers_[root].left_early = describe_early_exit(workers_[root].rank, records);
    }
  }
  // A hang: the first local rank that held the others up.
  const bool deadlock = watch::is_deadlock(hang_ranks_, o_.world_size());
  for (std::size_t i = workers_.size(); i-- > 0;) {
    WorkerRecord& w = workers_[i];
    if (std::find(hang_ranks_.begin(), hang_ranks_.end(), w.rank) == hang_ranks_.end()) continue;
    w.hang_role = !hang_role_.empty() ? hang_role_
                  : deadlock          ? "was in a deadlock with every other rank (see the hang report)"
                                      : "held the others up in a hang";
    root = i;
  }
  FailureReport r;
  r.attempt = c_.attempt;
  r.host = c_.host;
  r.node_rank = o_.node_rank;
  r.world_size = o_.world_size();
  r.root_cause = workers_[root];
  r.root_stderr_tail = merger_->stderr_tail(root);
  r.workers = workers_;
  r.job_start = job_start_;
  r.hang = hang_;
  r.error_files_kept = !o_.log_dir.empty();
  return r;
}

// Every rank's last progress record: once every worker has ended, from a read
// of the store that began after that (at most kFinalRecordsWait), so that it
// has their last records; before, the latest read. Empty without a reader.
std::vector<std::optional<wire::CollectiveProgress>> AttemptRunner::last_records() {
  if (!reader_) return {};
  watch::CollectiveProgressReader::Snapshot s = reader_->latest();
  const uint64_t fresh = s.generation + 2;  // the next read may have begun before
  const auto deadline = Clock::now() + kFinalRecordsWait;
  while (all_reaped_ && s.generation < fresh && Clock::now() < deadline) {
    std::this_thread::sleep_for(kReportPoll);
    s = reader_->latest();
  }
  return s.records;
}

rendezvous::NodeFailure AttemptRunner::node_failure(const FailureReport& r) const {
  rendezvous::NodeFailure f;
  f.node_rank = o_.node_rank;
  f.root_cause = root_cause_headline(r.root_cause, r.host, r.node_rank);
  if (r.root_cause.error) {
    const std::string& m = r.root_cause.error->message;
    f.error = m.substr(0, m.find('\n'));
  }
  return f;
}

// This node's workers failed (not for another node's failure): stops them
// and, on a multi-node job, tells the other launchers.
void AttemptRunner::stop_for_local_failure() {
  stop_all(SIGTERM);
  if (group_ && !remote_) group_->report(node_failure(failure_report()));
}

// Multi-node: another node's failure came first; stop this node's workers.
void AttemptRunner::check_group() {
  if (!group_ || remote_) return;
  const std::optional<rendezvous::NodeFailure> first = group_->first();
  if (!first || first->node_rank == o_.node_rank) return;
  remote_ = first;
  if (signal_ != 0 || killed_) return;
  say(first->left
          ? fmt::format("rankwise-run: {}; stopping this node's workers\n", first->root_cause)
          : fmt::format("rankwise-run: node {} failed: {}; stopping this node's "
                        "workers\n",
                        first->node_rank, first->root_cause));
  if (!stopping_) stop_all(SIGTERM);
}

// Polls group_->first() until `done` holds for it, at most `timeout`.
std::optional<rendezvous::NodeFailure> AttemptRunner::wait_for_group(
    const std::function<bool(const std::optional<rendezvous::NodeFailure>&)>& done,
    std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::optional<rendezvous::NodeFailure> f = group_->first();
  while (!done(f) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    f = group_->first();
  }
  return f;
}

// At the end of a failed multi-node attempt: which node's failure was first
// decides the root cause every launcher names. The first node publishes its
// summary's root cause; the others wait for it (its workers end within its
// grace period), else name what it published when it stopped them.
void AttemptRunner::settle_group_failure(FailureReport& r) {
  if (!remote_) {
    group_->flush(kGroupWait);
    const auto first = wait_for_group([](const auto& f) { return f.has_value(); }, kGroupWait);
    if (first && first->node_rank != o_.node_rank) remote_ = first;
  }
  if (!remote_) {
    group_->report_final(node_failure(r));
    group_->flush(kGroupWait);
    return;
  }
  if (remote_->left) {  // a launcher that left publishes nothing more
    r.remote = remote_;
    return;
  }
  const auto final = wait_for_group([](const auto& f) { return f && f->final; },
                                    o_.grace_period + kGroupWait + kGroupWait);
  r.remote = final ? final : remote_;
}

}  // namespace rankwise::launch::workers
