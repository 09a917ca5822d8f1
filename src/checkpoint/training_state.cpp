#include "rankwise/checkpoint/training_state.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include "checkpoint/detail/note.h"
#include "detail/all_gather_ivalues.h"
#include "rankwise/checkpoint/lr_scheduler_state.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/rng_state.h"
#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/error.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/process_group.h"

namespace rankwise {
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

int64_t integer(const Checkpoint& checkpoint, const std::string& key) {
  const auto& value = checkpoint.at(key);
  if (!value.isInt()) {
    throw CheckpointError("rankwise: checkpoint entry '" + key + "' is a " + value.tagKind() +
                          ", expected an integer");
  }
  return value.toInt();
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
  checkpoint.insert("world_size", static_cast<int64_t>(is_initialized() ? world_size() : 1));
  checkpoint.insert("rank_states", detail::all_gather_ivalues(local_state(state)));
  auto extras = new_dict();
  for (const auto& [name, value] : state.extras) extras.insert(name, value);
  checkpoint.insert("extras", extras);
  return checkpoint;
}

void restore(const Checkpoint& checkpoint, TrainingState& state) {
  const bool is_format = checkpoint.contains("format") && checkpoint.at("format").isString();
  const std::string format = is_format ? checkpoint.at("format").toStringRef() : "";
  if (format != kFormat && format != kFormatV1) {
    throw CheckpointError(std::string("rankwise: this checkpoint is not a training state (no "
                                      "\"format\": \"") +
                          kFormat + "\" entry); it was not written from rankwise::capture()");
  }
  const int64_t saved_world = integer(checkpoint, "world_size");
  const int64_t world = is_initialized() ? world_size() : 1;
  const int64_t my_rank = is_initialized() ? rank() : 0;
  const int64_t saved_position = integer(checkpoint, "position");
  const bool same_world = saved_world == world;
  if (!same_world && saved_position != 0) {
    throw CheckpointError(
        "rankwise: the checkpoint was written by " + std::to_string(saved_world) +
        " ranks in the middle of an epoch and this run has " + std::to_string(world) +
        "; the position in the epoch and the per-rank states (RNG, metric states) cannot be "
        "mapped to another world size. Resume with " + std::to_string(saved_world) +
        " ranks, or from a checkpoint written at an epoch end");
  }
  if (state.optimizer && checkpoint.contains("optimizer_type")) {
    const std::string saved = checkpoint.at("optimizer_type").toStringRef();
    const std::string mine = optimizer_type_name(*state.optimizer);
    if (saved != mine) {
      throw CheckpointError("rankwise: the checkpoint's optimizer is " + saved +
                            " and this run's is " + mine + "; resume with the same optimizer type");
    }
  }
  if (state.lr_scheduler && !checkpoint.contains("lr_scheduler")) {
    throw CheckpointError("rankwise: the checkpoint has no learning-rate scheduler state "
                          "(it was saved without TrainingState::lr_scheduler); resuming would "
                          "restart the schedule. Leave lr_scheduler unset to resume without it");
  }
  if (!state.lr_scheduler && checkpoint.contains("lr_scheduler")) {
    detail::note("rankwise: note: the checkpoint holds a learning-rate scheduler state that this "
                 "run does not restore (TrainingState::lr_scheduler is unset): the learning "
                 "rates come back as saved, but a scheduler made now starts its count at 0");
  }
  if (state.model) load_state_dict(*state.model, to_state_dict(checkpoint.at("model")));
  if (state.optimizer) load_optimizer_state_dict(*state.optimizer, checkpoint.at("optimizer"));
  if (state.lr_scheduler) {
    load_lr_scheduler_state_dict(*state.lr_scheduler, checkpoint.at("lr_scheduler"));
  }
  state.step = integer(checkpoint, "step");
  state.epoch = integer(checkpoint, "epoch");
  state.position = saved_position;
  state.extras.clear();
  for (const auto& entry : checkpoint.at("extras").toGenericDict()) {
    state.extras[entry.key().toStringRef()] = entry.value();
  }
  // At an epoch end a new world size is accepted: the model, optimizer and
  // counters carry over; per-rank RNG and metric states (one per old rank) do not.
  if (!same_world) return;

  const auto& rank_states = checkpoint.at("rank_states");
  if (!rank_states.isList() || rank_states.toListRef().size() != static_cast<std::size_t>(world)) {
    throw CheckpointError("rankwise: checkpoint entry 'rank_states' is not a list of " +
                          std::to_string(world) + " per-rank states");
  }
  const auto mine = rank_states.toListRef()[static_cast<std::size_t>(my_rank)].toGenericDict();
  set_rng_state(mine.at("rng"));
  const auto saved_metrics = mine.at("metrics").toGenericDict();
  for (const auto& [name, collection] : state.metrics) {
    if (!collection) continue;
    if (!saved_metrics.contains(name)) {
      throw CheckpointError("rankwise: the checkpoint has no state for the metric collection '" +
                            name + "'");
    }
    c10::Dict<std::string, torch::Tensor> metric_state;
    for (const auto& entry : saved_metrics.at(name).toGenericDict()) {
      metric_state.insert(entry.key().toStringRef(), entry.value().toTensor());
    }
    try {
      collection->load_state(metric_state);
    } catch (const ConfigError& e) {
      throw CheckpointError(std::string("rankwise: restoring metric collection '") + name +
                            "': " + e.what());
    }
  }
}

}  // namespace rankwise
