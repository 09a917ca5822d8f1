#include "rankwise/checkpoint/sharded_manager.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <filesystem>
#include <utility>

#include "checkpoint/async/background_save.h"
#include "checkpoint/async/host_snapshot.h"
#include "checkpoint/io/note.h"
#include "checkpoint/managers/manager_base.h"
#include "checkpoint/pickle/tensor_map.h"
#include "checkpoint/ranks/rank_zero.h"
#include "checkpoint/sharded/complete.h"
#include "checkpoint/sharded/object_record.h"
#include "checkpoint/sharded/save_phases.h"
#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint {
namespace {

managers::ManagedKind directories() {
  return {"ShardedCheckpointManager", "", "opening the sharded checkpoint directory on rank 0",
          sharded::check_sharded_complete, [](const std::string& path) {
            std::error_code ignored;
            std::filesystem::remove_all(path, ignored);
          }};
}

// `state` with every tensor replaced by its copy in `snapshot` (async::HostSnapshot::take_each: only
// the chunks' own elements), and its objects pickled into `pickled` (as the synchronous save pickles
// them: the same bytes) and rebuilt (pickle::map_tensors's copy of their containers, which c10
// shares by reference), for errors to show. Replicated tensors are written by rank 0 alone: the
// other ranks keep, for the report of their shapes and dtypes, a 0-dim tensor expanded to the shape.
ShardedState snapshot_of(const ShardedState& state, async::HostSnapshot& snapshot, sharded::PickledObjects& pickled) {
  const bool zero = dist::rank_or_zero() == 0;
  std::vector<at::Tensor> tensors;
  for (const auto& [key, entry] : state) {
    if (const auto* t = std::get_if<ShardedTensor>(&entry)) {
      for (const auto& chunk : t->chunks()) tensors.push_back(chunk.data);
    } else if (const auto* r = std::get_if<at::Tensor>(&entry)) {
      if (zero || !r->defined() || !r->device().is_cpu()) tensors.push_back(*r);  // the writer names the last two
    }
  }
  std::vector<at::Tensor> copies = snapshot.take_each(tensors);
  std::size_t next = 0;
  ShardedState copy;
  for (const auto& [key, entry] : state) {
    if (const auto* t = std::get_if<ShardedTensor>(&entry)) {
      std::vector<TensorChunk> chunks;
      for (const auto& chunk : t->chunks()) chunks.push_back(TensorChunk{chunk.offsets, copies[next++]});
      copy.emplace(key, ShardedTensor(t->global_shape(), t->dtype(), std::move(chunks)));
    } else if (const auto* r = std::get_if<at::Tensor>(&entry)) {
      if (zero || !r->defined() || !r->device().is_cpu()) {
        copy.emplace(key, copies[next++]);
      } else {
        copy.emplace(key, at::zeros({}, r->options()).expand(r->sizes()));
      }
    } else {
      const c10::IValue& value = std::get<ObjectEntry>(entry).value;
      pickled[key] = sharded::object_record_bytes(value, key);
      copy.emplace(key, ObjectEntry{pickle::map_tensors(value, [](const at::Tensor& t) { return t; })});
    }
  }
  return copy;
}

// The pruning after `published` (none when ""), on a save's writer thread.
// A failure loses nothing (the next pruning removes what this one left),
// so it is a note, not the next save's failure.
void prune_quietly(const managers::ManagerBase& base, const std::string& published) {
  if (published.empty()) return;
  try {
    base.prune(published);
  } catch (const std::exception& e) {
    io::note(core::message("could not remove old checkpoints after publishing '{}': {}; the next save tries again",
                           published, e.what()));
  }
}

// The previous asynchronous save's publication, on the leader of its only
// storage node, on the next save's writer thread (sharded::ShardedSave::
// publish_alone, then `latest`); its failure, for the next save's report (so
// that every rank raises it at the next call), or nullopt.
std::optional<std::string> publish_previous(const managers::ManagerBase& base, sharded::ShardedSave& previous) noexcept {
  try {
    previous.publish_alone();
    base.check_lock();
    base.point_latest(previous.dir());
    return std::nullopt;
  } catch (const std::exception& e) {
    return core::message("publishing the previous asynchronous save '{}' failed: {}", previous.dir(), e.what());
  }
}

// A failure of publish_previous() with no next save to report it (that save
// could not begin, and its own error is being raised): a note on stderr.
void note_failure(const std::optional<std::string>& failed) {
  if (failed) io::note(*failed + "; the checkpoint before it stays latest");
}

}  // namespace

ShardedCheckpointManager::ShardedCheckpointManager(CheckpointManagerOptions options)
    : base_(std::make_unique<managers::ManagerBase>(std::move(options), directories())),
      background_(std::make_unique<async::BackgroundSave>()) {
  // On node-local disks the other nodes need the directory too (on a shared one it is there).
  if (dist::rank_or_zero() != 0) {
    std::error_code ec;
    std::filesystem::create_directories(base_->options().directory(), ec);
  }
}

// A save still in flight is published as wait() would (collectively: every rank destroys its
// manager), unless an exception is ending the run (the other ranks may not be here: this rank's
// part is abandoned, its temporary files removed, and the previous checkpoint stays latest). A
// failure with nobody left to raise it to must not end the run as a success: each rank says why
// and exits with status 1, so the launcher names it.
ShardedCheckpointManager::~ShardedCheckpointManager() {
  if (!in_flight_) return;
  if (std::uncaught_exceptions() > 0) {
    try {
      background_->finish();
    } catch (...) {
    }
    in_flight_.reset();
    return;
  }
  try {
    wait();
  } catch (const std::exception& e) {
    async::exit_unwaited(e, "ShardedCheckpointManager");
  }
}

const CheckpointManagerOptions& ShardedCheckpointManager::options() const { return base_->options(); }

bool ShardedCheckpointManager::should_save(int64_t step, bool epoch_end) const {
  return base_->should_save(step, epoch_end);
}

std::vector<std::string> ShardedCheckpointManager::checkpoints() const { return base_->checkpoints(); }

// Each storage node's leader moves that node's `latest` and prunes its disk: rank 0 alone on a
// shared filesystem, one rank per node on node-local disks. Collective.
void ShardedCheckpointManager::point_latest(const std::string& path, bool leads, bool prune_now) {
  ranks::on_ranks(
      leads,
      [&] {
        base_->check_lock();
        base_->point_latest(path);
        if (prune_now) base_->prune(path);
      },
      fmt::format("moving `latest` to the sharded checkpoint '{}'", path));
  if (leads && !prune_now) prune_after_ = path;
}

std::string ShardedCheckpointManager::save(const ShardedState& state, int64_t step) {
  const auto started = std::chrono::steady_clock::now();
  const std::string path = base_->path_for_save(step);
  wait();
  const double waited = timings_.waited_ms;
  point_latest(path, sharded::save_sharded_leading(path, state, sharded::SaveLock::kHeldByCaller), true);
  timings_ = {waited, async::ms_since(started)};
  return path;
}

std::string ShardedCheckpointManager::save_async(const ShardedState& state, int64_t step) {
  const auto started = std::chrono::steady_clock::now();
  const std::string path = base_->path_for_save(step);
  const double waited = background_->finish().count();  // the thread reports, it never throws
  // The previous save: every rank's outcome agreed here (its failure raised here, on every rank).
  // With one storage node its leader publishes it, and prunes, on this save's writer thread;
  // here when it saved this same step (this save's begin would take its temporary directory
  // for a killed save's leftovers).
  const bool same_step = in_flight_ && in_flight_->dir() == path;
  std::shared_ptr<sharded::ShardedSave> previous = agree_in_flight(!same_step);
  std::unique_ptr<sharded::ShardedSave> save;
  try {  // collective: the temporary directory on every storage node
    save = std::make_unique<sharded::ShardedSave>(path, sharded::SaveLock::kHeldByCaller);
  } catch (...) {
    if (previous) note_failure(publish_previous(*base_, *previous));
    throw;
  }
  // Local from here on: a failure is this rank's report, raised on every rank at the next call.
  try {
    if (!snapshot_) snapshot_ = std::make_unique<async::HostSnapshot>();
    auto pickled = std::make_shared<sharded::PickledObjects>();
    auto copy = std::make_shared<const ShardedState>(snapshot_of(state, *snapshot_, *pickled));
    sharded::ShardedSave* writing = save.get();
    background_->start([this, writing, copy, pickled, previous, prune = std::exchange(prune_after_, "")] {
      if (const auto failed = previous ? publish_previous(*base_, *previous) : std::nullopt) {
        writing->fail(*failed);
        return;
      }
      prune_quietly(*base_, previous ? previous->dir() : prune);
      try {
        snapshot_->wait_for_device_copies();
      } catch (const std::exception& e) {
        writing->fail(std::string("copying its chunks from the device failed: ") + e.what());
        return;
      }
      writing->write(*copy, *pickled);
    });
  } catch (const std::exception& e) {
    save->fail(std::string("taking its snapshot (its chunks copied, its objects pickled) failed: ") + e.what());
    if (const auto failed = previous ? publish_previous(*base_, *previous) : std::nullopt) save->fail(*failed);
  }
  in_flight_ = std::move(save);
  timings_ = {waited, async::ms_since(started)};
  return path;
}

void ShardedCheckpointManager::wait() {
  const auto started = std::chrono::steady_clock::now();
  timings_.waited_ms = background_->finish().count();  // the thread reports, it never throws
  try {
    agree_in_flight(false);
  } catch (...) {
    timings_.blocked_ms = async::ms_since(started);
    throw;
  }
  timings_.blocked_ms = async::ms_since(started);
}

std::unique_ptr<sharded::ShardedSave> ShardedCheckpointManager::agree_in_flight(bool defer) {
  std::unique_ptr<sharded::ShardedSave> save = std::move(in_flight_);
  if (!save) return nullptr;
  try {
    if (save->agree() == 1 && defer) return save->leads() ? std::move(save) : nullptr;
    point_latest(save->dir(), save->publish_agreed(), !defer);
  } catch (const std::exception& e) {
    core::raise<CheckpointError>(
        "the asynchronous save of '{}' failed: {}; the checkpoint before it, if any, stays latest", save->dir(),
        e.what());
  }
  return nullptr;
}

std::optional<std::string> ShardedCheckpointManager::latest() const { return base_->latest(); }

std::optional<std::string> ShardedCheckpointManager::load_latest_collective(ShardedState& state) const {
  const auto decided = ranks::decided_on_rank_zero([&](c10::impl::GenericDict& decided) {
    if (auto path = latest()) decided.insert("path", *path);
  });
  if (!decided.contains("path")) return std::nullopt;
  const std::string path = decided.at("path").toStringRef();
  try {
    load_sharded_collective(path, state);
  } catch (const CheckpointError& e) {
    const std::string here = core::where({dist::rank_or_zero(), dist::world_size_or_one()});
    core::raise<CheckpointError>(
        "{}: loading the latest sharded checkpoint '{}' failed: {}. If it is damaged, move it "
        "aside to resume from the one before",
        here, path, e.what());
  }
  return path;
}

}  // namespace rankwise::checkpoint
