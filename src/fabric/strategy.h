#pragma once
// How the Fabric trains across ranks (FabricOptions::strategy): one object
// behind this interface per strategy, each in its own file
// (ddp_strategy.h, zero1_strategy.h, fsdp_strategy.h). A strategy owns the
// wrapped model and the optimizer the user gave, backward's sync scope
// while gradients accumulate, clipping, the optimizer's step, the model's
// and the optimizer's checkpoint entries, and replica checks.
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <string>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/checkpoint/sharded_metadata.h"
#include "rankwise/checkpoint/training_state.h"
#include "rankwise/fabric.h"
#include "rankwise/fabric/module.h"

namespace rankwise::amp {
class GradScaler;
}  // namespace rankwise::amp

namespace rankwise::fabric {

// The keys of a sharded checkpoint with what each holds (read_sharded_metadata()).
using StoredKeys = std::map<std::string, checkpoint::ShardedEntryMetadata>;

// Where a sharded checkpoint holds the model and the optimizer.
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optim.";

class Strategy {
 public:
  virtual ~Strategy() = default;

  // FabricOptions::strategy's name: "ddp", "zero1" or "fsdp".
  virtual const char* name() const = 0;
  // Whether the optimizer must be built over the FabricModule's parameters()
  // (sharded ones), so that setup(model, optimizer) cannot work.
  virtual bool shards_parameters() const { return false; }
  // Whether every rank writes its shards of each checkpoint (sharded) or
  // rank 0 writes one replicated file.
  virtual bool sharded_checkpoints() const = 0;

  // The wrapped model (Fabric::setup_module()); once.
  virtual void set_model(WrappedModel model) { model_ = std::move(model); }
  // The user's optimizer (Fabric::setup_optimizers()): checked against the
  // model, and wrapped where the strategy steps something else. Collective.
  virtual void set_optimizer(torch::optim::Optimizer& optimizer) { optimizer_ = &optimizer; }
  bool has_model() const { return model_.module != nullptr; }
  bool has_optimizer() const { return optimizer_ != nullptr; }
  torch::nn::Module& module() const { return *model_.module; }
  torch::optim::Optimizer& optimizer() const { return *optimizer_; }

  // A guard under which a batch's backward accumulates its gradients
  // locally, without communication (the accumulation policy's no_sync()).
  std::shared_ptr<void> no_sync() { return model_.no_sync ? model_.no_sync() : nullptr; }
  // After each Fabric::backward().
  virtual void after_backward() {}
  // True while gradients accumulated without synchronization are pending:
  // a checkpoint, which holds no gradients, would lose them.
  virtual bool accumulating() const = 0;
  // A training pass ended on this rank (every rank): DDP's join.
  virtual void end_pass() {}
  // Clips the gradients by their total norm over every rank's (unscaled by
  // `scaler` first, when given); returns that norm. Collective where the
  // gradients are sharded.
  virtual torch::Tensor clip_gradients(double max_norm, double norm_type, bool error_if_nonfinite,
                                       amp::GradScaler* scaler) = 0;
  // The optimizer's step (through `scaler`, when given: skipped on every rank
  // when a gradient is not finite), then zero_grad(); whether it stepped.
  virtual bool step(amp::GradScaler* scaler) = 0;
  // Compares the replicas across ranks (a debug check; collective).
  virtual void check_replicas() {}

  // Replicated checkpoints: points `state` at what capture() saves and
  // restore() loads (the model and the optimizer).
  virtual void add_to(checkpoint::TrainingState& state) const;
  // Sharded checkpoints: this rank's entries of the model ("model.<name>",
  // the plain module's names) and of the optimizer ("optim."); the entries a
  // load fills, given what the checkpoint stores; and loading them back.
  virtual checkpoint::ShardedState sharded_state_dict() const { return {}; }
  virtual checkpoint::ShardedState sharded_state_dict_to_load(const StoredKeys& stored) const {
    (void)stored;
    return {};
  }
  virtual void load_sharded_state_dict(const checkpoint::ShardedState& loaded) { (void)loaded; }

 protected:
  // The optimizer's step, through `scaler` when given; whether it stepped.
  static bool step_through(torch::optim::Optimizer& optimizer, amp::GradScaler* scaler);

  WrappedModel model_;
  torch::optim::Optimizer* optimizer_ = nullptr;
};

// An error's first line without its "rankwise: " and "rank r/W: " prefixes,
// to quote it inside another message.
std::string reason_of(const std::exception& error);

// The strategy FabricOptions::strategy names (checked: strategy_option_error()).
std::unique_ptr<Strategy> make_strategy(const FabricOptions& options);

}  // namespace rankwise::fabric
