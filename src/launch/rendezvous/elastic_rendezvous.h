#pragma once
/// \file elastic_rendezvous.h
/// Elastic membership (`--nnodes MIN:MAX --rdzv-backend c10d`): the launchers
/// of a job agree, through node 0's store, on the nodes of each rendezvous
/// round, in the spirit of torchelastic's c10d dynamic rendezvous.
///
/// Every launcher has a member id for the whole job: 0 for the one that hosts
/// the store, 1, 2, ... for the others as they connect. A round r is open
/// until it closes: once MIN nodes have joined it and every node of the round
/// before it ended its attempt (end_round()), it stays open for
/// last_call_timeout more (or until MAX have joined), then the first launcher
/// to see that writes its membership (compareSet: one writer wins, everyone
/// reads the same list). The round's nodes are numbered by member id, so the
/// store's host is node 0 of every round it is in. A launcher that joined too
/// late for a round (or found it full) joins the next one; the launchers
/// running a round watch for such a newcomer (newcomer_waiting()) and, when the
/// round has fewer than MAX nodes, stop their workers to let it in.
///
/// Store keys, under `<job prefix>elastic/`: `ids` (member id counter),
/// `round_<r>/count` and `round_<r>/slot_<i>` (who joined round r, as JSON
/// {"id", "host"}), `round_<r>/closed` (the membership, a JSON list sorted by
/// id), `round_<r>/over` (how many nodes of round r ended their attempt), `current` (the last closed round) and `ended` (why the job ended; its
/// nodes are done and launchers still waiting stop).

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch/rendezvous/launcher_heartbeat.h"

namespace c10d {
class TCPStore;
}

namespace rankwise::launch::rendezvous {

/// When a round closes (from LaunchOptions).
struct ElasticLimits {
  int min_nodes = 1;
  int max_nodes = 1;
  /// How long a launcher waits for a round to reach min_nodes (--rdzv-conf
  /// join_timeout, --rendezvous-timeout).
  std::chrono::milliseconds join_timeout{300000};
  /// How long a round with at least min_nodes stays open for more.
  std::chrono::milliseconds last_call_timeout{30000};
  /// How long a launcher that ended the round stays silent before the
  /// others stop waiting for it (LaunchOptions::launcher_silence_limit).
  std::chrono::milliseconds launcher_silence_limit = kLauncherSilenceLimit;
};

/// One launcher of the job.
struct ElasticMember {
  int id = 0;        ///< member id (see the file comment)
  std::string host;  ///< its host name, for messages
  int pid = 0;       ///< its launcher's pid, for messages (0: not shown)
};

/// A closed round, as every launcher in it sees it.
struct ElasticRound {
  int round = 0;
  std::vector<ElasticMember> members;  ///< sorted by id; node rank = index
  int node_rank = 0;                   ///< this launcher's index in members
};

/// Whether a round that `joined` launchers have joined closes at `now`:
/// `joined` >= max_nodes, or `joined` >= min_nodes for last_call_timeout
/// since `min_reached` (when this launcher first saw min_nodes).
bool elastic_round_closes(int joined, const ElasticLimits& limits,
                          std::optional<std::chrono::steady_clock::time_point> min_reached,
                          std::chrono::steady_clock::time_point now);

/// "node 1 (host b, pid 42)": member `m` as node `node_rank` of a round
/// (without the pid when it is 0).
std::string describe_member(int node_rank, const ElasticMember& m);

/// "node 0 (host a, pid 41), node 1 (host b, pid 42)": the members of a round
/// by node rank.
std::string describe_members(const std::vector<ElasticMember>& members);

/// The job ended (a round's nodes succeeded or gave up) while this launcher
/// waited to join; what() says why.
class ElasticJobEnded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ElasticRendezvous {
 public:
  /// `store`: the launcher's connection to node 0's store (shared with the
  /// threads that call it); `address` "host:port" for messages.
  ElasticRendezvous(std::shared_ptr<c10d::TCPStore> store, std::string address,
                    std::string job_key, ElasticLimits limits);

  /// This launcher's member id: 0 when it hosts the store, else the next of
  /// 1, 2, ... Throws RendezvousError when the store fails or does not answer
  /// within `timeout`.
  int take_member_id(bool host_store, std::chrono::milliseconds timeout);

  /// Joins round `first_round` or, when that one has closed without this
  /// launcher, the first later round still open, and waits until the round it
  /// joined closes with it. Polls `interrupted` every 100 ms and returns
  /// nullopt when it returned true. Throws ElasticJobEnded when the job ended
  /// meanwhile, and RendezvousError when fewer than min_nodes joined within
  /// join_timeout (naming how many did), when the round before still ran
  /// after join_timeout (a full job: saying so), or when the store failed.
  std::optional<ElasticRound> join(int first_round, const ElasticMember& me,
                                   const std::function<bool()>& interrupted);

  /// Marks this launcher's attempt of round `round` ended (for any reason).
  /// The next round's last call starts only once every node of `round` did
  /// (or one did and launcher_silence_limit passed: a node killed with SIGKILL
  /// never says so), so that two rounds' workers never run at once and the
  /// nodes of `round` all get into the next one. Waits at most 2 s; never throws.
  void end_round(int round);

  /// Marks the job ended with `reason` (the first mark stays); waits at most
  /// 2 s; never throws.
  void end_job(const std::string& reason);

 private:
  std::shared_ptr<c10d::TCPStore> store_;
  std::string address_;
  std::string prefix_;  // <job prefix>elastic/
  ElasticLimits limits_;
};

/// Whether a launcher not among `member_ids` has joined round `next_round`
/// (a node waiting to be let in). One store client call per joined slot;
/// throws what the store throws. For a StorePoller's thread.
bool newcomer_waiting(c10d::TCPStore& store, const std::string& job_key, int next_round,
                      const std::vector<int>& member_ids);

/// The secret key of round `round`'s launcher and worker keys (heartbeats,
/// node names, failures, the exit barrier), derived from the job's:
/// "<job key>.e<round>", or "e<round>" without one.
std::string round_job_key(const std::string& job_key, int round);

}  // namespace rankwise::launch::rendezvous
