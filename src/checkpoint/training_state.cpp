#include "rankwise/checkpoint/training_state.h"

#include "core/check.h"

#include <algorithm>
#include <limits>

#include <torch/serialize.h>
#include <torch/torch.h>

#include "checkpoint/io/note.h"
#include "dist/all_gather_ivalues.h"
#include "rankwise/checkpoint/lr_scheduler_state.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/rng_state.h"
#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/error.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint {
namespace {

constexpr const char* kFormat = "rankwise.training_state/2";
// Before optimizer state_dicts: the optimizer entry is libtorch's archive.
constexpr const char* kFormatV1 = "rankwise.training_state/1";

c10::impl::GenericDict new_dict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

// This rank's own state: RNG and metric states.
c10::IValue local_state(const TrainingState& state) {
  auto local = new_dict();
  local.insert("rng", rng_state());
  auto metrics = new_dict();
  for (const auto& [name, collection] : state.metrics) {
    if (collection) metrics.insert(name, collection->state());
  }
  local.insert("metrics", metrics);
  return local;
}

int64_t integer(const c10::IValue& value, const std::string& key) {
  if (!value.isInt()) {
    core::raise<CheckpointError>("checkpoint entry '{}' is a {}, expected an integer", key,
                                 value.tagKind());
  }
  return value.toInt();
}

int64_t integer(const Checkpoint& checkpoint, const std::string& key) {
  return integer(checkpoint.at(key), key);
}

c10::IValue stretches_value(const std::vector<data::DistributedSampler::Stretch>& stretches) {
  c10::impl::GenericList list(c10::DictType::create(c10::StringType::get(), c10::IntType::get()));
  for (const auto& stretch : stretches) {
    c10::Dict<std::string, int64_t> entry;
    entry.insert("world_size", stretch.num_replicas);
    entry.insert("position", stretch.per_rank);
    list.push_back(entry);
  }
  return list;
}

// The checkpoint's "epoch_stretches" (absent in checkpoints before it: none).
std::vector<data::DistributedSampler::Stretch> saved_stretches(const Checkpoint& checkpoint) {
  std::vector<data::DistributedSampler::Stretch> result;
  if (!checkpoint.contains("epoch_stretches")) return result;
  const auto& value = checkpoint.at("epoch_stretches");
  const std::string error = core::message(
      "checkpoint entry 'epoch_stretches' is not a list of {{\"world_size\", \"position\"}} dicts");
  if (!value.isList()) throw CheckpointError(error);
  for (const auto& item : value.toListRef()) {
    if (!item.isGenericDict()) throw CheckpointError(error);
    const auto dict = item.toGenericDict();
    if (!dict.contains("world_size") || !dict.contains("position")) throw CheckpointError(error);
    const int64_t world = integer(dict.at("world_size"), "epoch_stretches.world_size");
    const int64_t position = integer(dict.at("position"), "epoch_stretches.position");
    if (world < 1 || world > std::numeric_limits<int>::max() || position < 0) {
      throw CheckpointError(fmt::format("{} (world size {}, position {})", error, world, position));
    }
    result.push_back({static_cast<int>(world), position});
  }
  return result;
}

// The metric collection state `name` of one saved rank.
c10::Dict<std::string, torch::Tensor> saved_metric_state(const c10::IValue& rank_state,
                                                         const std::string& name) {
  const auto saved_metrics = rank_state.toGenericDict().at("metrics").toGenericDict();
  if (!saved_metrics.contains(name)) {
    core::raise<CheckpointError>("the checkpoint has no state for the metric collection '{}'",
                                 name);
  }
  c10::Dict<std::string, torch::Tensor> metric_state;
  for (const auto& entry : saved_metrics.at(name).toGenericDict()) {
    metric_state.insert(entry.key().toStringRef(), entry.value().toTensor());
  }
  return metric_state;
}

void load_metric_state(metrics::MetricCollection& collection, const std::string& name,
                       const c10::Dict<std::string, torch::Tensor>& state) {
  try {
    collection.load_state(state);
  } catch (const ConfigError& e) {
    core::raise<CheckpointError>("restoring metric collection '{}': {}", name, e.what());
  }
}

// Throws unless `checkpoint` is a training state of a format this release reads.
void check_format(const Checkpoint& checkpoint) {
  const bool is_format = checkpoint.contains("format") && checkpoint.at("format").isString();
  const std::string format = is_format ? checkpoint.at("format").toStringRef() : "";
  if (format != kFormat && format != kFormatV1) {
    core::raise<CheckpointError>(
        "this checkpoint is not a training state (no \"format\": \"{}\" entry); it was not written "
        "from rankwise::checkpoint::capture()",
        kFormat);
  }
}

// Throws when the checkpoint's optimizer type differs from this run's, or when `state` asks for
// a scheduler state the checkpoint lacks; notes a scheduler state this run does not restore.
void check_optimizer_and_scheduler(const Checkpoint& checkpoint, const TrainingState& state) {
  if (state.optimizer && checkpoint.contains("optimizer_type")) {
    const std::string saved = checkpoint.at("optimizer_type").toStringRef();
    const std::string mine = optimizer_type_name(*state.optimizer);
    if (saved != mine) {
      core::raise<CheckpointError>(
          "the checkpoint's optimizer is {} and this run's is {}; resume with the same optimizer "
          "type",
          saved, mine);
    }
  }
  if (state.lr_scheduler && !checkpoint.contains("lr_scheduler")) {
    core::raise<CheckpointError>(
        "the checkpoint has no learning-rate scheduler state (its run tracked none: no "
        "fabric.track(scheduler), or TrainingState::lr_scheduler unset); resuming would restart "
        "the schedule. Resume without the scheduler (do not track it) to go on anyway");
  }
  if (!state.lr_scheduler && checkpoint.contains("lr_scheduler")) {
    io::note(
        core::message("note: the checkpoint holds a learning-rate scheduler state that this run "
                      "does not restore (it tracks no scheduler: call fabric.track(scheduler), or "
                      "set TrainingState::lr_scheduler): the learning rates come back as saved, "
                      "but a scheduler made now starts its count at 0"));
  }
}

// What every rank restores alike: model, optimizer, scheduler, counters, stretches, extras.
void restore_replicated(const Checkpoint& checkpoint, TrainingState& state, int64_t saved_position,
                        std::vector<data::DistributedSampler::Stretch> stretches) {
  if (state.model) load_state_dict(*state.model, to_state_dict(checkpoint.at("model")));
  if (state.optimizer) load_optimizer_state_dict(*state.optimizer, checkpoint.at("optimizer"));
  if (state.lr_scheduler) {
    load_lr_scheduler_state_dict(*state.lr_scheduler, checkpoint.at("lr_scheduler"));
  }
  state.step = integer(checkpoint, "step");
  state.epoch = integer(checkpoint, "epoch");
  state.position = saved_position;
  state.epoch_stretches = std::move(stretches);
  state.extras.clear();
  for (const auto& entry : checkpoint.at("extras").toGenericDict()) {
    state.extras[entry.key().toStringRef()] = entry.value();
  }
}

// The checkpoint's "rank_states": one dict per saved rank, each with "rng" and "metrics".
c10::ArrayRef<c10::IValue> saved_rank_states(const Checkpoint& checkpoint, int64_t saved_world) {
  const auto& rank_states = checkpoint.at("rank_states");
  const bool valid = rank_states.isList() &&
                     rank_states.toListRef().size() == static_cast<std::size_t>(saved_world) &&
                     std::all_of(rank_states.toListRef().begin(), rank_states.toListRef().end(),
                                 [](const c10::IValue& v) {
                                   return v.isGenericDict() && v.toGenericDict().contains("rng") &&
                                          v.toGenericDict().contains("metrics") &&
                                          v.toGenericDict().at("metrics").isGenericDict();
                                 });
  if (!valid) {
    core::raise<CheckpointError>(
        "checkpoint entry 'rank_states' is not a list of {} per-rank states", saved_world);
  }
  return rank_states.toListRef();
}

// Same world size: this rank's own RNG and metric states.
void restore_own_rank(const c10::IValue& mine, TrainingState& state) {
  set_rng_state(mine.toGenericDict().at("rng"));
  for (const auto& [name, collection] : state.metrics) {
    if (collection) load_metric_state(*collection, name, saved_metric_state(mine, name));
  }
}

// Mid-epoch at another world size: the epoch goes on from what the earlier
// stretches left (DistributedSampler::resume_epoch); metric states of every
// old rank are merged on rank 0 and reset elsewhere; rank r takes old rank
// r's RNG state where there is one.
void restore_at_other_world(c10::ArrayRef<c10::IValue> saved_ranks, int64_t saved_position,
                            TrainingState& state) {
  const auto saved_world = static_cast<int64_t>(saved_ranks.size());
  const int64_t world = dist::world_size_or_one();
  const int64_t my_rank = dist::rank_or_zero();
  state.epoch_stretches.push_back({static_cast<int>(saved_world), saved_position});
  state.position = 0;
  for (const auto& [name, collection] : state.metrics) {
    if (!collection) continue;
    std::vector<c10::Dict<std::string, torch::Tensor>> parts;
    for (const auto& saved : saved_ranks) parts.push_back(saved_metric_state(saved, name));
    c10::Dict<std::string, torch::Tensor> merged;
    try {
      merged = collection->merge_states(parts);
    } catch (const ConfigError& e) {
      core::raise<CheckpointError>("restoring metric collection '{}': {}", name, e.what());
    }
    if (my_rank == 0) {
      load_metric_state(*collection, name, merged);
    } else {
      collection->reset();
    }
  }
  if (my_rank < saved_world) {
    set_rng_state(saved_ranks[static_cast<std::size_t>(my_rank)].toGenericDict().at("rng"));
  }
  io::note(core::message(
      "note: the checkpoint was written mid-epoch at world size {} and this run has {}: the epoch "
      "continues with the samples not yet seen, metric states are merged, and {} (randomness does "
      "not continue bitwise at another world size)",
      saved_world, world,
      (world <= saved_world
           ? std::string("each rank takes the RNG state of the old rank of its number")
           : fmt::format("ranks 0-{} take the RNG states of the old ranks of their number, the "
                         "others keep their own",
                         saved_world - 1))));
}

}  // namespace

Checkpoint capture(const TrainingState& state) {
  Checkpoint checkpoint;
  checkpoint.insert("format", std::string(kFormat));
  if (state.model) checkpoint.insert("model", state_dict(*state.model));
  if (state.optimizer) {
    checkpoint.insert("optimizer", optimizer_state_dict(*state.optimizer));
    checkpoint.insert("optimizer_type", optimizer_type_name(*state.optimizer));
  }
  if (state.lr_scheduler) {
    checkpoint.insert("lr_scheduler", lr_scheduler_state_dict(*state.lr_scheduler));
  }
  checkpoint.insert("step", state.step);
  checkpoint.insert("epoch", state.epoch);
  checkpoint.insert("position", state.position);
  checkpoint.insert("world_size", static_cast<int64_t>(dist::world_size_or_one()));
  checkpoint.insert("epoch_stretches", stretches_value(state.epoch_stretches));
  checkpoint.insert("rank_states", dist::all_gather_ivalues(local_state(state)));
  auto extras = new_dict();
  for (const auto& [name, value] : state.extras) extras.insert(name, value);
  checkpoint.insert("extras", extras);
  return checkpoint;
}

void restore(const Checkpoint& checkpoint, TrainingState& state) {
  check_format(checkpoint);
  const int64_t saved_world = integer(checkpoint, "world_size");
  const int64_t world = dist::world_size_or_one();
  const int64_t my_rank = dist::rank_or_zero();
  const int64_t saved_position = integer(checkpoint, "position");
  auto stretches = saved_stretches(checkpoint);
  if (saved_world < 1 || saved_world > std::numeric_limits<int>::max() || saved_position < 0) {
    core::raise<CheckpointError>("the checkpoint's world_size ({}) or position ({}) is invalid",
                                 saved_world, saved_position);
  }
  const bool same_world = saved_world == world;
  const bool mid_epoch = saved_position != 0 || !stretches.empty();
  check_optimizer_and_scheduler(checkpoint, state);
  restore_replicated(checkpoint, state, saved_position, std::move(stretches));
  // At an epoch end a new world size is accepted: the model, optimizer and
  // counters carry over; per-rank RNG and metric states (one per old rank) do not.
  if (!same_world && !mid_epoch) return;

  const auto saved_ranks = saved_rank_states(checkpoint, saved_world);
  if (same_world) {
    restore_own_rank(saved_ranks[static_cast<std::size_t>(my_rank)], state);
  } else {
    restore_at_other_world(saved_ranks, saved_position, state);
  }
}

}  // namespace rankwise::checkpoint
