#pragma once
// What identifies a run in its checkpoints (TrainingState::extras under
// "fabric."): the training data's size, the batch size, the seed, the
// accumulation, the precision, the strategy, the initial learning rates and
// the GradScaler's state; and what a resume checks against them.
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rankwise/fabric.h"

namespace rankwise::amp {
class GradScaler;
}  // namespace rankwise::amp

namespace rankwise::fabric {

// Keys of TrainingState::extras that identify the run.
constexpr const char* kTrainSamplesKey = "fabric.train_samples";
constexpr const char* kBatchSizeKey = "fabric.batch_size";
constexpr const char* kSeedKey = "fabric.seed";
constexpr const char* kInitialLrKey = "fabric.initial_lr";
constexpr const char* kAccumulateKey = "fabric.accumulate";
constexpr const char* kPrecisionKey = "fabric.precision";
constexpr const char* kStrategyKey = "fabric.strategy";
// The GradScaler's state_dict() under precision 16-mixed (Python's layout).
constexpr const char* kGradScalerKey = "fabric.grad_scaler";

using Extras = std::map<std::string, c10::IValue>;

class RunIdentity {
 public:
  // The training loader's (Fabric::setup_dataloader), once there is one.
  bool has_training_loader = false;
  int64_t train_samples = 0;
  int64_t batch_size = 0;

  // Each param_group's learning rate at setup_optimizers(), for the note
  // that a resume keeps the checkpoint's.
  void record_learning_rates(const torch::optim::Optimizer& optimizer);

  // At the first training pass, every rank: refuses (ConfigError on every
  // rank) training loaders whose dataset size or batch size differ between
  // ranks, naming which ranks have which. Collective (one all_gather).
  void check_same_loader_on_every_rank() const;

  // Writes the run's identity into `extras`, with `scaler`'s state (when not null).
  void describe(Extras& extras, const FabricOptions& options, const amp::GradScaler* scaler) const;

  // After a resume restored `saved` (its extras) at `position` from `path`:
  // refuses a checkpoint of another run (other training data; another batch
  // size mid-epoch) with a ConfigError, and notes what will not match an
  // uninterrupted run. Local.
  void check_same_run(const Extras& saved, int64_t position, const std::string& path,
                      const FabricOptions& options) const;

 private:
  void note_other_learning_rate(const Extras& saved) const;

  std::vector<double> initial_lrs_;
};

// Under 16-mixed, the checkpoint's GradScaler state, so that a resume
// continues with the scale an uninterrupted run has (a note when it has none).
void restore_scaler(amp::GradScaler& scaler, const Extras& saved);

}  // namespace rankwise::fabric
