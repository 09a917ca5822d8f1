#include "fabric/run_identity.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>

#include "core/check.h"
#include "rankwise/amp/grad_scaler.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "util/text.h"

namespace rankwise::fabric {
namespace {

std::optional<int64_t> integer(const Extras& saved, const char* key) {
  const auto it = saved.find(key);
  if (it == saved.end() || !it->second.isInt()) return std::nullopt;
  return it->second.toInt();
}

std::optional<std::string> text(const Extras& saved, const char* key) {
  const auto it = saved.find(key);
  if (it == saved.end() || !it->second.isString()) return std::nullopt;
  return it->second.toStringRef();
}

}  // namespace

void RunIdentity::record_learning_rates(const torch::optim::Optimizer& optimizer) {
  initial_lrs_.clear();
  try {
    for (const auto& group : optimizer.param_groups()) initial_lrs_.push_back(group.options().get_lr());
  } catch (const c10::Error&) {
    initial_lrs_.clear();  // an optimizer whose options have no lr: nothing to compare
  }
}

namespace {

// "4 on ranks 0, 2; 8 on rank 1": which ranks have which value.
std::string by_rank(const std::vector<int64_t>& values) {
  std::map<int64_t, std::vector<int>> ranks;
  for (std::size_t r = 0; r < values.size(); ++r) ranks[values[r]].push_back(static_cast<int>(r));
  std::string text;
  for (const auto& [value, which] : ranks) {
    text += fmt::format("{}{} on {}", text.empty() ? "" : "; ", value, util::rank_list(which));
  }
  return text;
}

}  // namespace

void RunIdentity::check_same_loader_on_every_rank() const {
  if (!dist::is_initialized() || dist::world_size() == 1) return;
  const auto gathered = dist::all_gather(torch::tensor({train_samples, batch_size}, torch::kLong));
  std::vector<int64_t> samples, batches;
  for (const auto& t : gathered) {
    samples.push_back(t[0].item<int64_t>());
    batches.push_back(t[1].item<int64_t>());
  }
  const auto same = [](const std::vector<int64_t>& v) { return std::equal(v.begin() + 1, v.end(), v.begin()); };
  if (same(samples) && same(batches)) return;
  core::raise<ConfigError>(
      "the training loaders differ between ranks (Fabric::setup_dataloader): dataset size {}; "
      "batch size {}. Every rank must give the same dataset and batch size (the Fabric shards the "
      "dataset itself); ranks would otherwise run different numbers of batches and wait for each "
      "other forever",
      by_rank(samples), by_rank(batches));
}

void RunIdentity::describe(Extras& extras, const FabricOptions& options, const amp::GradScaler* scaler) const {
  if (has_training_loader) {
    extras[kTrainSamplesKey] = train_samples;
    extras[kBatchSizeKey] = batch_size;
  }
  extras[kSeedKey] = static_cast<int64_t>(options.seed());
  extras[kAccumulateKey] = options.accumulate();
  extras[kPrecisionKey] = options.precision();
  extras[kStrategyKey] = options.strategy();
  if (scaler) {
    extras[kGradScalerKey] = scaler->state_dict();
  } else {
    extras.erase(kGradScalerKey);
  }
  if (!initial_lrs_.empty()) extras[kInitialLrKey] = c10::List<double>(initial_lrs_);
}

// A resume restores the optimizer's hyper-parameters with its state (as
// PyTorch's optimizer.load_state_dict does), so a learning rate that this
// program set differently from the checkpoint's run (e.g. another --lr) is
// not used: say so. Compared at setup, before any scheduler changed it.
void RunIdentity::note_other_learning_rate(const Extras& saved) const {
  const auto it = saved.find(kInitialLrKey);
  if (initial_lrs_.empty() || it == saved.end() || !it->second.isList()) return;
  std::vector<double> before;  // a generic list once unpickled
  for (const c10::IValue& lr : it->second.toListRef()) {
    if (!lr.isDouble()) return;
    before.push_back(lr.toDouble());
  }
  if (before == initial_lrs_) return;
  print0("note: this program set the learning rate {} but the checkpoint's run started with {}; "
         "a resume restores the optimizer's options with its state, so training continues with "
         "the checkpoint's; to use the new one, call param_groups()[i].options().set_lr() "
         "inside the epoch loop (fabric.epochs() restores the checkpoint as the loop starts)",
         fmt::join(initial_lrs_, ", "), fmt::join(before, ", "));
}

// A resume must see the same data; mid-epoch, also the same batches.
void RunIdentity::check_same_run(const Extras& saved, int64_t position, const std::string& path,
                                 const FabricOptions& options) const {
  note_other_learning_rate(saved);
  if (!has_training_loader) return;
  const auto samples = integer(saved, kTrainSamplesKey);
  const auto batch = integer(saved, kBatchSizeKey);
  const auto seed = integer(saved, kSeedKey);
  const auto accumulate = integer(saved, kAccumulateKey).value_or(1);
  const std::string saved_precision = text(saved, kPrecisionKey).value_or("32-true");
  if (saved_precision != options.precision()) {
    print0("note: resuming with precision {} (the checkpoint's run used {}): the run will not "
           "match an uninterrupted one",
           options.precision(), saved_precision);
  }
  const std::string saved_strategy = text(saved, kStrategyKey).value_or("ddp");
  if (saved_strategy != options.strategy()) {
    print0("note: resuming with strategy {} (the checkpoint's run used {})", options.strategy(),
           saved_strategy);
  }
  if (accumulate != options.accumulate()) {
    print0("note: resuming with accumulate {} (the checkpoint's run used {}): step() counts "
           "optimizer steps, so the run will not match an uninterrupted one",
           options.accumulate(), accumulate);
  }
  if (samples && *samples != train_samples) {
    core::raise<ConfigError>(core::here(),
                             "{} was written by a run on {} training samples and this run's "
                             "training loader has {}: resume with the same data, or start a new "
                             "run in another checkpoint directory (or overwrite this one)",
                             path, *samples, train_samples);
  }
  if (position > 0 && batch && *batch != batch_size) {
    core::raise<ConfigError>(
        core::here(),
        "{} was written in the middle of an epoch with batch size {}; this run has {}: resume "
        "mid-epoch with the same batch size (or from an epoch-end checkpoint)",
        path, *batch, batch_size);
  }
  if (position > 0 && seed && *seed != static_cast<int64_t>(options.seed())) {
    core::raise<ConfigError>(
        core::here(),
        "{} was written in the middle of an epoch with seed {}; this run has seed {}, which would "
        "deal the rest of that epoch in another order (some samples twice, others never): resume "
        "mid-epoch with --seed {} (FabricOptions::seed), or change the seed from an epoch-end "
        "checkpoint",
        path, *seed, options.seed(), *seed);
  }
  if ((batch && *batch != batch_size) || (seed && *seed != static_cast<int64_t>(options.seed()))) {
    print0("note: resuming with batch size {} and seed {} (the checkpoint's run used {} and {}); "
           "the run will not match an uninterrupted one",
           batch_size, options.seed(), batch.value_or(batch_size),
           seed.value_or(static_cast<int64_t>(options.seed())));
  }
}

void restore_scaler(amp::GradScaler& scaler, const Extras& saved) {
  const auto it = saved.find(kGradScalerKey);
  if (it != saved.end()) {
    scaler.load_state_dict(it->second);
  } else {
    print0("note: the checkpoint holds no GradScaler state (its run did not use precision "
           "16-mixed); loss scaling starts anew at scale {}",
           scaler.get_scale());
  }
}

}  // namespace rankwise::fabric
