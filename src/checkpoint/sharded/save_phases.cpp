// The sharded save's phases across ranks (save_phases.h): rank 0's
// temporary directory announced, storage nodes claimed, every rank's report
// agreed, then .metadata, the manifest and the rename on each node's leader
// (save_files.h), each step's outcome raised on every rank when any failed.
#include "checkpoint/sharded/save_phases.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>
#include "checkpoint/io/atomic_file.h"
#include "checkpoint/io/file_lock.h"
#include "checkpoint/io/leftovers.h"
#include "checkpoint/ranks/rank_failures.h"
#include "dist/all_gather_ivalues.h"
#include "checkpoint/sharded/storage_claim.h"
#include "util/text.h"
#include "core/check.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"
#include "checkpoint/sharded/save_files.h"

namespace fs = std::filesystem;

namespace rankwise::checkpoint::sharded {
namespace {

using nlohmann::json;

// Every rank's `text`, on every rank; a failure (a rank that died) becomes
// a CheckpointError that keeps c10d's words (which name the missing ranks).
std::vector<std::string> gather_texts(const std::string& text, const std::string& dir, const std::string& here,
                                      const std::string& step) {
  try {
    auto list = dist::all_gather_ivalues(c10::IValue(text));
    std::vector<std::string> out;
    for (std::size_t r = 0; r < list.size(); ++r) out.push_back(list.get(r).toStringRef());
    return out;
  } catch (const std::exception& e) {
    core::raise<CheckpointError>(
        "{}: save_sharded('{}') failed while {}: a rank failed or exited before it reported. "
        "Nothing was published; the previous checkpoint at this path is untouched. Original error: "
        "{}",
        here, dir, step, e.what());
  }
}

// One rank's outcome of a step, as it crosses to the others: done (with a
// value, e.g. the temporary directory's path) or failed (with the error).
struct Outcome {
  bool ok = true;
  std::string text;  // the value, or the error

  static Outcome done(std::string value = "") { return {true, std::move(value)}; }
  static Outcome failed(std::string why) { return {false, std::move(why)}; }
  std::string encoded() const { return json{{"ok", ok}, {"text", text}}.dump(); }
  static Outcome decoded(const std::string& text) {
    const json j = json::parse(text);
    return {j.at("ok").get<bool>(), j.at("text").get<std::string>()};
  }
};

// Every rank's outcome, on every rank (gather_texts' failures).
std::vector<Outcome> gather_outcomes(const Outcome& mine, const std::string& dir, const std::string& here,
                                     const std::string& step) {
  std::vector<Outcome> all;
  for (const auto& text : gather_texts(mine.encoded(), dir, here, step)) all.push_back(Outcome::decoded(text));
  return all;
}

// One rank's save_sharded(): who it is, and the temporary directory once step 1 made it.
struct SaveRun {
  std::string dir;
  int rank = 0;
  int world = 1;
  std::string here;  // "rank r/W"
  std::string tmp;

  // Before publication every rank removes its view of the temporary directory on a failure (the same
  // directory for ranks that share it, harmlessly): a node whose leader died is left clean too.
  void remove_tmp() const {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }

  // gather_outcomes(), removing the temporary directory when it fails.
  std::vector<Outcome> gather(const Outcome& mine, const std::string& step) const {
    try {
      return gather_outcomes(mine, dir, here, step);
    } catch (...) {
      remove_tmp();
      throw;
    }
  }

  // Throws on every rank, after removing the temporary directory, when any outcome failed.
  void fail_if_any(const std::vector<Outcome>& outcomes, const std::string& step) const {
    std::vector<std::string> failures;  // outcomes[r] is rank r's
    std::vector<int> ranks;
    for (std::size_t r = 0; r < outcomes.size(); ++r) {
      if (outcomes[r].ok) continue;
      failures.push_back(outcomes[r].text);
      ranks.push_back(static_cast<int>(r));
    }
    if (failures.empty()) return;
    remove_tmp();
    const std::string why = ranks::grouped_failures(failures, ranks, world);
    const char* kept = "the previous checkpoint at this path is untouched";
    core::raise<CheckpointError>("{}: save_sharded('{}') failed while {} on {}: {}. Nothing was published{}", here,
                                 dir, step, util::rank_list(ranks), why,
                                 why.find(kept) == std::string::npos ? std::string("; ") + kept : "");
  }

  // Every rank's outcome of `step`; throws on every rank when any failed.
  void agree(const Outcome& outcome, const std::string& step) const { fail_if_any(gather(outcome, step), step); }
};

SaveRun start_run(const std::string& dir) {
  SaveRun run;
  run.dir = io::without_trailing_slash(dir);
  const bool grouped = dist::is_initialized();
  run.rank = grouped ? dist::process_group().rank() : 0;
  run.world = grouped ? dist::process_group().world_size() : 1;
  run.here = core::where({run.rank, run.world});
  return run;
}

// A report of this rank's failure, in write_part's terms.
std::string failed_report(const SaveRun& run, const std::string& why) {
  return json{{"ok", false}, {"error", fmt::format("{}: {}", run.here, why)}}.dump();
}

// Step 1, rank 0: locks `dir`.lock (unless the caller holds the directory's lock), removes what a
// killed save left, creates the temporary directory: done with its path, or failed.
Outcome create_temp_dir(const std::string& dir, sharded::SaveLock take, std::optional<io::FileLock>& lock) {
  try {
    check_replaceable(dir);  // before any rank writes: refused at once, not after every data file
    if (take == sharded::SaveLock::kTake) lock.emplace(dir + ".lock", fmt::format("sharded checkpoint '{}'", dir));
    io::remove_leftovers_with_note(dir, "save_sharded", take == sharded::SaveLock::kHeldByCaller);
    const std::string made = make_temp_dir(dir);
    try {
      sharded::write_storage_marker(made, 0);
    } catch (...) {
      std::error_code ec;
      fs::remove_all(made, ec);
      throw;
    }
    return Outcome::done(made);
  } catch (const std::exception& e) {
    return Outcome::failed(e.what());
  }
}

// Step 1, every rank: rank 0's temporary directory, or rank 0's error raised on every rank.
std::string announced_temp_dir(const SaveRun& run, sharded::SaveLock take, std::optional<io::FileLock>& lock) {
  const Outcome first = run.rank == 0 ? create_temp_dir(run.dir, take, lock) : Outcome::done();
  const Outcome zero = gather_outcomes(first, run.dir, run.here, "creating the temporary directory")[0];
  if (!zero.ok) {
    throw CheckpointError(run.rank == 0 ? zero.text
                                        : fmt::format("{} (rank 0's error, raised on rank {})", zero.text, run.rank));
  }
  return zero.text;
}

// Step 2: whether this rank leads its storage node (storage_claim.h).
bool claim_storage(const SaveRun& run) {
  bool leads = run.rank == 0;
  Outcome claim;
  if (run.rank != 0 && run.tmp.rfind(run.dir + ".rankwise-tmp.", 0) != 0) {
    // Every rank must save the same checkpoint (the same step of a manager).
    claim = Outcome::failed(fmt::format("{}: it saves '{}' while rank 0 saves the temporary directory '{}'; every rank must "
                        "pass the same directory (for a manager, the same step)",
                        run.here, run.dir, run.tmp));
  } else if (run.rank != 0) {
    try {
      leads = sharded::claim_directory(run.tmp, run.rank);
    } catch (const std::exception& e) {
      claim = Outcome::failed(fmt::format("{}: {}", run.here, e.what()));
    }
  }
  run.agree(claim, "creating the temporary directory on every node");
  return leads;
}

// Step 3, this rank: writes its data file into its storage node's directory; its report (JSON), or
// its error as a report. Local: no communication (it may run on a thread of its own).
std::string write_data_file(const SaveRun& run, bool leads, const ShardedState& state,
                            const sharded::PickledObjects& pickled) {
  try {
    const int leader = leads ? run.rank : sharded::read_storage_marker(run.tmp, std::chrono::seconds(10));
    return write_part(run.tmp, run.rank, leader, state, pickled).dump();
  } catch (const std::exception& e) {
    return failed_report(run, e.what());
  }
}

// Step 3, every rank: every rank's report; throws on every rank when any could not write.
// Returns the reports and the storage nodes' leaders, in rank order.
std::pair<std::vector<std::string>, std::vector<int>> gather_reports(const SaveRun& run, const std::string& report) {
  std::vector<std::string> reports;
  try {
    reports = gather_texts(report, run.dir, run.here, "gathering every rank's outcome");
  } catch (...) {
    run.remove_tmp();
    throw;
  }
  std::vector<int> leaders;
  std::vector<Outcome> written;
  for (const auto& r : reports) {
    const json part = json::parse(r);
    if (!part.at("ok").get<bool>()) {
      written.push_back(Outcome::failed(part.at("error").get<std::string>()));
      continue;
    }
    written.push_back(Outcome::done());
    const int l = part.at("leader").get<int>();
    if (std::find(leaders.begin(), leaders.end(), l) == leaders.end()) leaders.push_back(l);
  }
  std::sort(leaders.begin(), leaders.end());
  run.fail_if_any(written, "writing the data files");
  return {std::move(reports), std::move(leaders)};
}

// Step 4: each leader writes .metadata and the manifest; throws on every rank when any could not.
void prepare_every_node(const SaveRun& run, bool leads, const std::vector<std::string>& reports) {
  Outcome prepared;
  if (leads) {
    try {
      prepare(run.dir, run.tmp, reports);
    } catch (const std::exception& e) {
      prepared = Outcome::failed(e.what());
    }
  }
  run.agree(prepared, "writing .metadata and the manifest on every node");
}

// Step 5: each leader renames its node's directory into place; every rank learns every node's outcome.
void publish_every_node(const SaveRun& run, bool leads, const std::vector<int>& leaders) {
  Outcome published;
  if (leads) {
    try {
      publish_directory(run.tmp, run.dir);
    } catch (const std::exception& e) {
      run.remove_tmp();
      published = Outcome::failed(fmt::format("{} (leader of a storage node): {}", run.here, e.what()));
    }
  }
  std::vector<Outcome> outcomes;
  try {
    outcomes = gather_outcomes(published, run.dir, run.here, "publishing");
  } catch (const std::exception& e) {  // a leader died or hung while publishing
    core::raise<CheckpointError>(
        "{}: save_sharded('{}'): {} did not report the publication: the path holds the previous "
        "checkpoint or the new one, each whole, on each node (load it to know which). Original "
        "error: {}",
        run.here, run.dir,
        (leaders.size() <= 1 ? std::string("rank 0")
                             : fmt::format("a storage node's leader ({})", util::rank_list(leaders))),
        e.what());
  }
  std::vector<std::string> failed;
  for (const auto& o : outcomes) {
    if (!o.ok) failed.push_back(o.text);
  }
  if (!failed.empty()) {
    const bool none = failed.size() == leaders.size();
    core::raise<CheckpointError>(
        "{}: save_sharded('{}'): {} of {} storage node(s) could not publish: {}. {}", run.here, run.dir,
        failed.size(), leaders.size(), fmt::join(failed, "; "),
        none ? "None holds the new checkpoint; save again"
             : "The others hold the new checkpoint; a collective load (load_sharded_collective) refuses the mix, so "
               "save again");
  }
}

}  // namespace

struct ShardedSave::Run {
  SaveRun run;
  bool leads = false;
  std::optional<io::FileLock> lock;  // rank 0, SaveLock::kTake: held to the end
  std::string report;  // this rank's, from write() or fail()
  bool publishing = false;  // from agree() on, the temporary directory is publication's to remove
  std::vector<std::string> reports;  // every rank's, once agreed
  std::vector<int> leaders;  // the storage nodes' leaders, once agreed
};

ShardedSave::ShardedSave(const std::string& dir, SaveLock take) : run_(std::make_unique<Run>()) {
  run_->run = start_run(dir);
  // 1. Rank 0 locks `dir`.lock (held to the end: a second job saving to `dir` is refused), removes
  //    what a killed save left, creates the temporary directory and tells the others its name.
  run_->run.tmp = announced_temp_dir(run_->run, take, run_->lock);
  // 2. Every other rank creates it too where it does not exist (a node's own
  //    disk): such a rank leads its storage node; see storage_claim.h.
  run_->leads = claim_storage(run_->run);
}

ShardedSave::~ShardedSave() {
  if (!run_->publishing) run_->run.remove_tmp();  // abandoned before publication
}

const std::string& ShardedSave::dir() const { return run_->run.dir; }

bool ShardedSave::leads() const { return run_->leads; }

void ShardedSave::write(const ShardedState& state, const PickledObjects& pickled) noexcept {
  try {
    // 3. Every rank writes its own file (into its storage node's directory).
    run_->report = write_data_file(run_->run, run_->leads, state, pickled);
  } catch (...) {  // fmt or json themselves failing (memory): still a report
    fail("writing the data file failed (out of memory?)");
  }
}

void ShardedSave::fail(const std::string& why) noexcept {
  try {
    run_->report = failed_report(run_->run, why);
  } catch (...) {
    run_->report = R"({"ok": false, "error": "a rank failed before it wrote its data file"})";
  }
}

std::size_t ShardedSave::agree() {
  run_->publishing = true;
  if (run_->report.empty()) fail("its data file was never written (a bug in rankwise)");
  // 3. ... and reports; any rank's failure is raised on every rank.
  std::tie(run_->reports, run_->leaders) = gather_reports(run_->run, run_->report);
  return run_->leaders.size();
}

bool ShardedSave::publish_agreed() {
  // 4. Each storage node's leader checks the reports and writes .metadata and
  //    the manifest; only when every node has them does any node publish.
  prepare_every_node(run_->run, run_->leads, run_->reports);
  // 5. Each leader renames its node's directory into place; every rank learns every node's outcome.
  publish_every_node(run_->run, run_->leads, run_->leaders);
  return run_->leads;
}

void ShardedSave::publish_alone() {
  if (!run_->leads || run_->leaders.size() != 1) {
    core::raise<CheckpointError>("internal error: publish_alone('{}') on a rank that is not the only leader",
                                 run_->run.dir);
  }
  try {
    // Steps 4 and 5 with nobody to agree with: the one storage node's leader.
    prepare(run_->run.dir, run_->run.tmp, run_->reports);
    publish_directory(run_->run.tmp, run_->run.dir);
  } catch (...) {
    run_->run.remove_tmp();
    throw;
  }
}

bool ShardedSave::publish() {
  agree();
  return publish_agreed();
}

bool save_sharded_leading(const std::string& dir, const ShardedState& state, SaveLock take) {
  ShardedSave save(dir, take);
  save.write(state);
  return save.publish();
}

}  // namespace rankwise::checkpoint::sharded
