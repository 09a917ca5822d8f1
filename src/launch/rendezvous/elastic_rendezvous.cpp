#include "launch/rendezvous/elastic_rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <thread>

#include "util/text.h"
#include "wire/collective_progress.h"
#include "launch/rendezvous/off_thread.h"
#include "launch/rendezvous/launcher_heartbeat.h"
#include "launch/rendezvous/node_rendezvous.h"
#include "launch/output/say.h"
#include "launch/rendezvous/store_poller.h"

namespace rankwise::launch::rendezvous {

namespace {
using SteadyClock = std::chrono::steady_clock;

std::string elastic_prefix(const std::string& job_key) {
  return rankwise::wire::job_prefix(job_key) + "elastic/";
}
std::string count_key(const std::string& prefix, int round) {
  return fmt::format("{}round_{}/count", prefix, round);
}
std::string slot_key(const std::string& prefix, int round, std::int64_t slot) {
  return fmt::format("{}round_{}/slot_{}", prefix, round, slot);
}
std::string closed_round_key(const std::string& prefix, int round) {
  return fmt::format("{}round_{}/closed", prefix, round);
}
std::string over_key(const std::string& prefix, int round) {
  return fmt::format("{}round_{}/over", prefix, round);
}

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

nlohmann::json to_json(const ElasticMember& m) {
  return {{"id", m.id}, {"host", m.host}, {"pid", m.pid}};
}

// A member as written by to_json; nullopt for anything else (another
// program's key).
std::optional<ElasticMember> member_from(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("id") || !j["id"].is_number_integer() || !j.contains("host") ||
      !j["host"].is_string()) {
    return std::nullopt;
  }
  const auto pid = j.find("pid");
  return ElasticMember{j["id"].get<int>(), j["host"].get<std::string>(),
                       pid != j.end() && pid->is_number_integer() ? pid->get<int>() : 0};
}

// Who joined `round`, in slot order (at most `limit`). A slot is written
// right after its counter was taken: each is waited for up to 2 s.
std::vector<ElasticMember> joined_members(c10d::TCPStore& store, const std::string& prefix,
                                          int round, std::int64_t count) {
  std::vector<ElasticMember> members;
  for (std::int64_t s = 0; s < count; ++s) {
    std::optional<std::string> text;
    for (auto until = SteadyClock::now() + std::chrono::seconds(2);
         !(text = read_if_set(store, slot_key(prefix, round, s))) && SteadyClock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!text) continue;  // its launcher died between the two calls
    const auto m = member_from(nlohmann::json::parse(*text, nullptr, false));
    if (m) members.push_back(*m);
  }
  return members;
}
}  // namespace

bool elastic_round_closes(int joined, const ElasticLimits& limits,
                          std::optional<SteadyClock::time_point> min_reached,
                          SteadyClock::time_point now) {
  if (joined >= limits.max_nodes) return true;
  return joined >= limits.min_nodes && min_reached &&
         now - *min_reached >= limits.last_call_timeout;
}

std::string describe_member(int node_rank, const ElasticMember& m) {
  return m.pid > 0 ? fmt::format("node {} (host {}, pid {})", node_rank, m.host, m.pid)
                   : fmt::format("node {} (host {})", node_rank, m.host);
}

std::string describe_members(const std::vector<ElasticMember>& members) {
  std::string text;
  for (std::size_t n = 0; n < members.size(); ++n) {
    text +=
        fmt::format("{}{}", n == 0 ? "" : ", ", describe_member(static_cast<int>(n), members[n]));
  }
  return text;
}

std::string round_job_key(const std::string& job_key, int round) {
  return job_key.empty() ? fmt::format("e{}", round) : fmt::format("{}.e{}", job_key, round);
}

ElasticRendezvous::ElasticRendezvous(std::shared_ptr<c10d::TCPStore> store, std::string address,
                                     std::string job_key, ElasticLimits limits)
    : store_(std::move(store)),
      address_(std::move(address)),
      prefix_(elastic_prefix(job_key)),
      limits_(limits) {}

int ElasticRendezvous::take_member_id(bool host_store, std::chrono::milliseconds timeout) {
  if (host_store) return 0;
  auto id = std::make_shared<std::int64_t>(0);
  Waited waited = Waited::kDone;
  try {
    waited = run_off_thread(
        [store = store_, key = prefix_ + "ids", id](const std::atomic<bool>&) {
          *id = store->add(key, 1);
        },
        SteadyClock::now() + timeout, [] { return false; });
  } catch (const std::exception& e) {
    throw RendezvousError(
        fmt::format("rendezvous: the store {} failed: {}", address_, util::first_line(e)));
  }
  if (waited != Waited::kDone) {
    throw RendezvousError(fmt::format("rendezvous: the store {} did not answer within {} s",
                                      address_, timeout.count() / 1000.0));
  }
  return static_cast<int>(*id);
}

namespace {

// What join()'s thread found.
struct JoinOutcome {
  std::optional<ElasticRound> round;
  std::string ended;              // the job ended: why
  int stuck_round = -1;           // timed out in this round ...
  std::int64_t stuck_joined = 0;  // ... with this many joined ...
  bool previous_running = false;  // ... while the round before still ran
};

// join()'s wait, on a thread of its own (which owns it): enters the first
// open round, closes it when it may close, and moves on to the next round
// when one closed without this launcher.
class RoundWaiter {
 public:
  RoundWaiter(std::shared_ptr<c10d::TCPStore> store, std::string prefix, ElasticLimits limits,
              ElasticMember me, std::shared_ptr<JoinOutcome> out)
      : store_(std::move(store)),
        prefix_(std::move(prefix)),
        limits_(limits),
        me_(std::move(me)),
        out_(std::move(out)) {}

  void run(int first_round, const std::atomic<bool>& cancel) {
    round_ = first_round;
    if (const auto current = read_if_set(*store_, prefix_ + "current")) {
      round_ = std::max(round_, std::stoi(*current) + 1);
    }
    entered_ = SteadyClock::now();
    // A round that closed already is running: join the next one.
    while (store_->check({closed_round_key(prefix_, round_)})) ++round_;
    enter(round_);
    deadline_ = SteadyClock::now() + limits_.join_timeout;
    for (;;) {
      if (cancel) {
        // Interrupted (a signal): this launcher will not run the round.
        store_->deleteKey(my_slot_);
        return;
      }
      if (const auto ended = read_if_set(*store_, prefix_ + "ended")) {
        out_->ended = *ended;
        return;
      }
      if (const auto closed = read_if_set(*store_, closed_round_key(prefix_, round_))) {
        if (take_closed_round(*closed)) return;
        continue;
      }
      if (!look_at_open_round()) return;
    }
  }

 private:
  void enter(int r) {
    const std::int64_t slot = store_->add(count_key(prefix_, r), 1) - 1;
    my_slot_ = slot_key(prefix_, r, slot);
    store_->set(my_slot_, bytes(to_json(me_).dump()));
  }

  // The round before `r` is over when each of its nodes ended its
  // attempt (end_round), or, when one did, after the heartbeat limit
  // (a node killed with SIGKILL never says so).
  bool previous_over(int r, SteadyClock::time_point now, std::int64_t* done) {
    *done = 0;
    if (r == 0) return true;
    const auto members = read_if_set(*store_, closed_round_key(prefix_, r - 1));
    if (!members) return true;  // never closed: nothing runs
    const auto list = nlohmann::json::parse(*members, nullptr, false);
    const std::size_t n = list.is_array() ? list.size() : 0;
    const std::string over = over_key(prefix_, r - 1);
    *done = store_->check({over}) ? store_->add(over, 0) : 0;
    if (*done > 0 && !first_over_seen_) first_over_seen_ = now;
    return static_cast<std::size_t>(*done) >= n ||
           (first_over_seen_ && now - *first_over_seen_ >= limits_.launcher_silence_limit);
  }

  // The current round closed with membership `closed`: true when this
  // launcher is in it (out_->round), else it enters the next round.
  bool take_closed_round(const std::string& closed) {
    ElasticRound r;
    r.round = round_;
    const auto list = nlohmann::json::parse(closed, nullptr, false);
    for (const auto& j : list.is_array() ? list : nlohmann::json::array()) {
      if (const auto m = member_from(j)) r.members.push_back(*m);
    }
    const auto mine = std::find_if(r.members.begin(), r.members.end(),
                                   [&](const ElasticMember& m) { return m.id == me_.id; });
    if (mine != r.members.end()) {
      r.node_rank = static_cast<int>(mine - r.members.begin());
      out_->round = std::move(r);
      return true;
    }
    // Closed without this launcher (it came late, or the round
    // was full): the next round.
    enter(++round_);
    min_reached_.reset();
    first_over_seen_.reset();
    deadline_ = SteadyClock::now() + limits_.join_timeout;
    return false;
  }

  // One look at the open round: closes it when it may close, else waits
  // 100 ms. Returns false at the join timeout (out_ says where it stuck).
  bool look_at_open_round() {
    const std::int64_t joined = store_->add(count_key(prefix_, round_), 0);
    const auto now = SteadyClock::now();
    // A round opens only when the one before it is over (one of its
    // nodes ended it): never two rounds' workers at once. Its last
    // call starts then, so the nodes of the round before can rejoin.
    std::int64_t done = 0;
    const bool over = previous_over(round_, now, &done);
    if (!over && done == 0 && !said_waiting_ && now - entered_ >= std::chrono::seconds(2)) {
      // Only a newcomer sees no node of the running round done.
      output::say(
          fmt::format("waiting for a place in the job: round {} runs with --nnodes {}:{}; "
                      "this node joins round {} when round {} ends",
                      round_ - 1, limits_.min_nodes, limits_.max_nodes, round_, round_ - 1));
      said_waiting_ = true;
    }
    if (joined >= limits_.min_nodes && over && !min_reached_) min_reached_ = now;
    if (over && elastic_round_closes(static_cast<int>(joined), limits_, min_reached_, now)) {
      close_round(joined);
      return true;
    }
    if (now >= deadline_) {
      out_->stuck_round = round_;
      out_->stuck_joined = joined;
      out_->previous_running = !over;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return true;
  }

  // Writes the round's membership: the first `joined` (at most MAX) by id.
  void close_round(std::int64_t joined) {
    std::vector<ElasticMember> members =
        joined_members(*store_, prefix_, round_, std::min<std::int64_t>(joined, limits_.max_nodes));
    std::sort(members.begin(), members.end(),
              [](const ElasticMember& a, const ElasticMember& b) { return a.id < b.id; });
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : members) list.push_back(to_json(m));
    // One closer wins; the loop reads what it wrote.
    store_->compareSet(closed_round_key(prefix_, round_), {}, bytes(list.dump()));
    store_->set(prefix_ + "current", bytes(std::to_string(round_)));
  }

  const std::shared_ptr<c10d::TCPStore> store_;
  const std::string prefix_;
  const ElasticLimits limits_;
  const ElasticMember me_;
  const std::shared_ptr<JoinOutcome> out_;
  int round_ = 0;
  std::string my_slot_;  // removed when this launcher stops waiting
  SteadyClock::time_point entered_;
  SteadyClock::time_point deadline_;
  std::optional<SteadyClock::time_point> min_reached_;
  std::optional<SteadyClock::time_point> first_over_seen_;
  bool said_waiting_ = false;
};

// join() found no round: it timed out (`out`), saying why.
[[noreturn]] void throw_join_timeout(const JoinOutcome& out, const ElasticLimits& limits,
                                     const std::string& address) {
  if (out.previous_running) {
    throw RendezvousError(fmt::format(
        "elastic rendezvous: this node waited {} s at {} for a place in round {}, but round {} "
        "still runs (with --nnodes {}:{}, a running round takes in a new node only while it has "
        "fewer than {}); start this node again later, or raise --rendezvous-timeout",
        limits.join_timeout.count() / 1000.0, address, out.stuck_round, out.stuck_round - 1,
        limits.min_nodes, limits.max_nodes, limits.max_nodes));
  }
  throw RendezvousError(fmt::format(
      "elastic rendezvous round {} timed out after {} s at {}: {} of the {} node(s) needed "
      "(--nnodes {}:{}) joined; start rankwise-run on more nodes with the same --rdzv-id and "
      "--rdzv-endpoint, or raise --rendezvous-timeout",
      out.stuck_round, limits.join_timeout.count() / 1000.0, address, out.stuck_joined,
      limits.min_nodes, limits.min_nodes, limits.max_nodes));
}

}  // namespace

std::optional<ElasticRound> ElasticRendezvous::join(int first_round, const ElasticMember& me,
                                                    const std::function<bool()>& interrupted) {
  auto out = std::make_shared<JoinOutcome>();
  auto waiter = std::make_shared<RoundWaiter>(store_, prefix_, limits_, me, out);
  Waited waited = Waited::kDone;
  try {
    const auto wait = [waiter, first_round](const std::atomic<bool>& cancel) {
      waiter->run(first_round, cancel);
    };
    // The thread keeps the join timeout; a store that stops answering
    // is given 5 s more. A launcher waiting for a full job to make room
    // may wait several timeouts.
    waited = run_off_thread(wait, SteadyClock::time_point::max(), interrupted);
  } catch (const std::exception& e) {
    throw RendezvousError(fmt::format(
        "elastic rendezvous: the store at {} failed ({}): the launcher that hosts it (node 0 of "
        "every round) is gone, and the job with it",
        address_, util::first_line(e)));
  }
  if (waited == Waited::kInterrupted) return std::nullopt;
  if (!out->ended.empty()) throw ElasticJobEnded(out->ended);
  if (out->round) return out->round;
  throw_join_timeout(*out, limits_, address_);
}

void ElasticRendezvous::end_round(int round) {
  try {
    run_off_thread(
        [store = store_, key = over_key(prefix_, round)](const std::atomic<bool>&) {
          store->add(key, 1);
        },
        SteadyClock::now() + std::chrono::seconds(2), [] { return false; });
  } catch (const std::exception&) {
    // The store is gone: nobody is left waiting on it.
  }
}

void ElasticRendezvous::end_job(const std::string& reason) {
  try {
    run_off_thread(
        [store = store_, key = prefix_ + "ended", reason](const std::atomic<bool>&) {
          store->compareSet(key, {}, bytes(reason));
        },
        SteadyClock::now() + std::chrono::seconds(2), [] { return false; });
  } catch (const std::exception&) {
    // The store is gone: nobody is left waiting on it.
  }
}

bool newcomer_waiting(c10d::TCPStore& store, const std::string& job_key, int next_round,
                      const std::vector<int>& member_ids) {
  const std::string prefix = elastic_prefix(job_key);
  const std::string count = count_key(prefix, next_round);
  if (!store.check({count})) return false;
  for (const ElasticMember& m :
       joined_members(store, prefix, next_round, store.add(count, 0))) {
    if (std::find(member_ids.begin(), member_ids.end(), m.id) == member_ids.end()) return true;
  }
  return false;
}

}  // namespace rankwise::launch::rendezvous
