#include "fabric/fabric_core.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "compat/autocast.h"
#include "dist/caller_site.h"
#include "core/check.h"
#include "rankwise/device.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/monitor/step_stats.h"
#include "wire/preemption.h"

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

void FabricCore::ensure_resumed() {
  started = true;
  if (!pending) return;
  if (!strategy->has_model()) {
    core::raise<ConfigError>(
        core::here(),
        "a checkpoint ({}) is to be resumed but no model was set up: call Fabric::setup(model, "
        "optimizer), or setup_module and setup_optimizers (and setup_dataloader, track) before "
        "the training loop",
        pending_path);
  }
  const auto checkpoint = std::move(pending);
  checkpoint->restore(state, *strategy);  // collective
  identity.check_same_run(state.extras, state.position, pending_path, options);
  if (scaler) restore_scaler(*scaler, state.extras);
  describe_run();
  resumed = true;
  saved_step = state.step;
  if (state.epoch_stretches.empty()) {
    print0("resumed from {} at step {} (epoch {}, {} samples into it on each rank)", pending_path,
           state.step, state.epoch + 1, state.position);
    return;
  }
  std::string earlier;
  for (const auto& stretch : state.epoch_stretches) {
    earlier += fmt::format("{}{} samples on each of {} ranks", earlier.empty() ? "" : ", then ",
                           stretch.per_rank, stretch.num_replicas);
  }
  print0("resumed from {} at step {} (epoch {} at world size {}, after {}; the rest of the "
         "epoch is dealt anew, {} samples into it on each rank)",
         pending_path, state.step, state.epoch + 1, dist::world_size_or_one(),
         earlier, state.position);
}

monitor::MetricsLog* FabricCore::log() {
  if (run_log.is_open() || options.metrics_dir().empty()) return run_log.open(options, {});
  std::error_code error;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  monitor::RunConfig config{{"program", error ? std::string("run") : exe.filename().string()},
                            {"device", device.str()},
                            {"seed", static_cast<int64_t>(options.seed())},
                            {"accumulate", options.accumulate()},
                            {"precision", options.precision()},
                            {"strategy", options.strategy()},
                            {"checkpoint_dir", options.checkpoint_dir()}};
  if (identity.has_training_loader) {
    config.emplace_back("train_samples", identity.train_samples);
    config.emplace_back("batch_size_per_rank", identity.batch_size);
  }
  if (meter.flops_per_sample() > 0) config.emplace_back("flops_per_sample", meter.flops_per_sample());
  return run_log.open(options, std::move(config));
}

void FabricCore::log_progress() {
  auto* metrics_log = log();
  if (!metrics_log || !metrics_log->writing()) return;
  monitor::MetricValues values{{"loss", meter.bar().loss()}};
  const auto t = throughput();
  if (t.mfu) values.emplace_back("mfu", *t.mfu);
  if (const auto saves = schedule.take()) {
    values.emplace_back("checkpoint_blocked_ms", saves->blocked_ms);
    values.emplace_back("checkpoint_waited_ms", saves->waited_ms);
  }
  metrics_log->log_step(state.step, state.epoch + 1, values, t.samples_per_s, meter.bar().rank_stats());
}

void FabricCore::start_progress(int64_t total, int64_t done) {
  meter.start(state.epoch + 1, std::max(total_epochs, state.epoch + 1), total, done, device, compute_dtype(options));
}

void FabricCore::update_progress(int64_t real_samples) {
  if (meter.update(real_samples)) log_progress();
}

void FabricCore::end_progress() {
  if (meter.end()) log_progress();
}

void FabricCore::save_if_due(bool epoch_end, bool run_end) {
  if (!checkpoints) return;
  if (!schedule.save_now(*checkpoints, state.step, epoch_end, run_end, accumulating_now())) return;
  describe_run();
  write(state, /*scheduled=*/true);
}

std::string FabricCore::save_explicit() {
  describe_run();
  if (!batch_in_flight) return write(state, /*scheduled=*/false);
  checkpoint::TrainingState counted = state;  // the metrics and the rest by pointer
  if (accumulation.boundary()) counted.step += 1;
  counted.position = *batch_in_flight;
  return write(counted, /*scheduled=*/false);
}

std::string FabricCore::write(const checkpoint::TrainingState& s, bool scheduled) {
  if (!checkpoints) {
    core::raise<ConfigError>(core::here(),
                             "Fabric::save without a checkpoint directory; set "
                             "FabricOptions::checkpoint_dir (--checkpoint-dir)");
  }
  strategy->check_replicas();  // collective: a checkpoint holds the one model every rank has
  const std::string path = checkpoints->save(s, *strategy, scheduled && options.checkpoint_async());
  schedule.add(checkpoints->last_timings());
  saved_step = s.step;
  return path;
}

void FabricCore::finish_saves() {
  if (strategy->has_model()) strategy->check_replicas();  // the run ends with one model
  if (!checkpoints) return;
  checkpoints->wait();
  schedule.add(checkpoints->last_timings());
}

void FabricCore::exit_preempted() {
  finish_saves();
  if (saved_step != state.step) {
    describe_run();
    write(state, /*scheduled=*/false);
  }
  run_log.close();
  if (dist::is_initialized()) dist::barrier();  // no rank leaves while another still writes
  print0("preempted (SIGTERM): every rank saved step {} (epoch {}, {} samples into it on each "
         "rank) in {}; exiting with status {}: run the job again with --resume to go on",
         state.step, state.epoch + 1, state.position, options.checkpoint_dir(), wire::kPreemptedExitCode);
  std::fflush(nullptr);
  std::_Exit(wire::kPreemptedExitCode);
}

int64_t LoaderHooks::epoch(FabricCore& core) { return core.state.epoch; }

std::pair<int64_t, int64_t> LoaderHooks::begin_training_pass(FabricCore& core,
                                                              const std::source_location& loop) {
  dist::set_loop_site(loop);
  if (!std::exchange(core.loaders_checked, true)) core.identity.check_same_loader_on_every_rank();
  core.ensure_resumed();
  core.accumulation.reset();
  if (core.state.position == 0 && core.state.epoch_stretches.empty()) {  // an epoch's start
    for (auto& [name, metrics] : core.state.metrics) metrics->reset();
  }
  return {core.state.epoch, core.state.position};
}

void LoaderHooks::leave_training_loop(FabricCore&) { dist::set_loop_site(std::nullopt); }

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
  core.accumulation.begin_batch(start, end, shard_size, core.options.accumulate(), *core.strategy);
}

void LoaderHooks::start_training_progress(FabricCore& core, int64_t total, int64_t done) {
  core.start_progress(total, done);
}

void LoaderHooks::end_training_batch(FabricCore& core, int64_t end, int64_t shard_size,
                                     int64_t real_samples) {
  core.batch_in_flight.reset();
  // The batch's samples, padding duplicates included (they were computed).
  const bool stepped = core.accumulation.end_batch(end - core.state.position);
  core.state.position = end;
  if (stepped) {  // else within an accumulation group: the same step
    monitor::record_step(core.accumulation.samples(), std::exchange(core.last_loss, std::nullopt));
    core.state.step += 1;
  }
  core.update_progress(real_samples);  // every batch, on every rank: its count decides
  const bool preempted = core.preemption.after_batch();
  if (!stepped || end >= shard_size) return;  // the epoch's end saves
  core.save_if_due(/*epoch_end=*/false);
  if (preempted && !core.accumulating_now()) core.exit_preempted();
}

void LoaderHooks::end_training_pass(FabricCore& core, int64_t epoch) {
  core.batch_in_flight.reset();
  core.end_progress();
  core.accumulation.reset();
  core.strategy->end_pass();  // every rank, after its last batch
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
