#include "rankwise/checkpoint/sharded_manager.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <exception>
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
  const bool zero = ranks::this_rank() == 0;
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

}  // namespace

ShardedCheckpointManager::ShardedCheckpointManager(CheckpointManagerOptions options)
    : base_(std::make_unique<managers::ManagerBase>(std::move(options), directories())),
      background_(std::make_unique<async::BackgroundSave>()) {
  // On node-local disks the other nodes need the directory too (on a shared one it is there).
  if (ranks::this_rank() != 0) {
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
  // Publishes the previous one (its failure is raised here, on every rank);
  // its pruning goes to this save's writer thread, off the training thread.
  finish_in_flight(false);
  const double waited = timings_.waited_ms;
  // Collective: the temporary directory on every storage node.
  auto save = std::make_unique<sharded::ShardedSave>(path, sharded::SaveLock::kHeldByCaller);
  // Local from here on: a failure is this rank's report, raised on every rank at the next call.
  try {
    if (!snapshot_) snapshot_ = std::make_unique<async::HostSnapshot>();
    auto pickled = std::make_shared<sharded::PickledObjects>();
    auto copy = std::make_shared<const ShardedState>(snapshot_of(state, *snapshot_, *pickled));
    sharded::ShardedSave* writing = save.get();
    background_->start([this, writing, copy, pickled, prune = std::exchange(prune_after_, "")] {
      prune_quietly(*base_, prune);
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
  }
  in_flight_ = std::move(save);
  timings_ = {waited, async::ms_since(started)};
  return path;
}

void ShardedCheckpointManager::wait() { finish_in_flight(true); }

void ShardedCheckpointManager::finish_in_flight(bool prune_now) {
  const auto started = std::chrono::steady_clock::now();
  timings_.waited_ms = 0;
  if (auto save = std::move(in_flight_)) {
    try {
      timings_.waited_ms = background_->finish().count();  // the thread reports, it never throws
      point_latest(save->dir(), save->publish(), prune_now);
    } catch (const std::exception& e) {
      timings_.blocked_ms = async::ms_since(started);
      core::raise<CheckpointError>(
          "the asynchronous save of '{}' failed: {}; the checkpoint before it, if any, stays latest", save->dir(),
          e.what());
    }
  }
  timings_.blocked_ms = async::ms_since(started);
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
    const std::string here = dist::is_initialized() ? core::where(core::at(dist::process_group())) : core::where({0, 1});
    core::raise<CheckpointError>(
        "{}: loading the latest sharded checkpoint '{}' failed: {}. If it is damaged, move it "
        "aside to resume from the one before",
        here, path, e.what());
  }
  return path;
}

}  // namespace rankwise::checkpoint
