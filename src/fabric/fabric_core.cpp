#include "fabric/fabric_core.h"

#include "core/check.h"

#include <torch/cuda.h>

#include <fmt/format.h>

#include "rankwise/device.h"
#include "rankwise/error.h"

namespace rankwise::fabric {

torch::Device resolve_device(const std::string& option) {
  const std::string error = device_option_error(option);
  if (!error.empty()) core::raise<ConfigError>("{}", error);
  if (option == "auto") return rankwise::device();
  if (option == "cpu") return torch::Device(torch::kCPU);
  if (option == "cuda") return rankwise::device(DeviceKind::kCuda);
  const auto index = std::stoll(option.substr(5));
  const auto visible = static_cast<long long>(torch::cuda::device_count());
  if (index >= visible) {
    const std::string choices =
        visible == 0 ? std::string("use auto or cpu")
                     : fmt::format("use cuda:0 to cuda:{} (CUDA_VISIBLE_DEVICES renumbers them "
                                   "from 0), auto or cpu",
                                   visible - 1);
    core::raise<ConfigError>("device {}: this process sees {} GPU{}; {}", option, visible,
                             visible == 1 ? "" : "s", choices);
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int64_t LoaderHooks::epoch(FabricCore& core) { return core.state.epoch; }

std::pair<int64_t, int64_t> LoaderHooks::begin_training_pass(FabricCore& core) {
  core.ensure_resumed();
  core.reset_accumulation();
  if (core.state.position == 0 && core.state.epoch_stretches.empty()) {  // an epoch's start
    for (auto& [name, metrics] : core.state.metrics) metrics->reset();
  }
  return {core.state.epoch, core.state.position};
}

std::pair<int64_t, int64_t> LoaderHooks::next_training_pass(FabricCore& core) {
  core.ensure_resumed();
  return {core.state.epoch, core.state.position};
}

std::vector<data::DistributedSampler::Stretch> LoaderHooks::epoch_stretches(FabricCore& core) {
  return core.state.epoch_stretches;
}

void LoaderHooks::begin_training_batch(FabricCore& core, int64_t start, int64_t end,
                                       int64_t shard_size) {
  core.batch_in_flight = end;
  core.begin_accumulation_batch(start, end, shard_size);
}

void LoaderHooks::start_training_progress(FabricCore& core, int64_t total, int64_t done) {
  core.start_progress(total, done);
}

void LoaderHooks::end_training_batch(FabricCore& core, int64_t end, int64_t shard_size,
                                     int64_t real_samples) {
  core.batch_in_flight.reset();
  // The batch's samples, padding duplicates included (they were computed).
  const bool stepped = core.end_accumulation_batch(end - core.state.position);
  core.state.position = end;
  if (stepped) {  // else within an accumulation group: the same step
    monitor::record_step(core.group.samples, std::exchange(core.last_loss, std::nullopt));
    core.state.step += 1;
  }
  core.update_progress(real_samples);  // every batch, on every rank: its count decides
  if (stepped && end < shard_size) core.save_if_due(/*epoch_end=*/false);
}

void LoaderHooks::end_training_pass(FabricCore& core, int64_t epoch) {
  core.batch_in_flight.reset();
  core.end_progress();
  core.reset_accumulation();
  if (core.model_hooks.join) core.model_hooks.join();  // every rank, after its last batch
  core.state.epoch = epoch + 1;
  core.state.position = 0;
  core.state.epoch_stretches.clear();
}

BatchTarget LoaderHooks::batch_target(FabricCore& core) {
  return {core.device, core.true_dtype()};
}

std::shared_ptr<void> LoaderHooks::autocast(FabricCore& core) {
  const auto dtype = core.autocast_dtype();
  if (!dtype) return nullptr;
  return std::make_shared<compat::AutocastGuard>(core.device.type(), dtype);
}

}  // namespace rankwise::fabric
