#include "rankwise/device.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <stdexcept>

#include "core/check.h"
#include "util/text.h"
#include "util/visible_devices.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "core/process_env.h"

namespace rankwise {
namespace {

constexpr const char* kVariable = "CUDA_VISIBLE_DEVICES";

ConfigError bad_value(const std::string& value, const std::string& detail) {
  return ConfigError(core::message(
      "environment variable {}='{}' is invalid: {}. Give comma-separated device indices or UUIDs, "
      "e.g. {}=2,3 or {}=GPU-8932f937; \"\" or -1 hides every GPU, unset shows all (CUDA would "
      "silently ignore everything from the bad entry on; rankwise refuses)",
      std::string(kVariable), value, detail, kVariable, kVariable));
}

std::string describe(const std::optional<std::vector<std::string>>& visible) {
  if (!visible) return std::string(kVariable) + " unset";
  return std::string(kVariable) + "=" + util::join_strings(*visible, ",");
}

}  // namespace

std::optional<std::vector<std::string>> parse_cuda_visible_devices(
    const std::optional<std::string>& value) {
  try {
    return util::parse_visible_devices(value);
  } catch (const std::invalid_argument& e) {
    throw bad_value(*value, e.what());
  }
}

std::string DeviceAssignment::device_string() const {
  return is_cuda() ? fmt::format("cuda:{}", visible_index) : "cpu";
}

torch::Device DeviceAssignment::torch_device() const {
  return is_cuda() ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(visible_index))
                   : torch::Device(torch::kCPU);
}

DeviceAssignment assign_device(int local_rank, int local_world_size, int device_count,
                               const std::optional<std::vector<std::string>>& visible,
                               DeviceKind kind) {
  RANKWISE_CHECK(local_world_size >= 1 && local_rank >= 0 && local_rank < local_world_size,
                 ConfigError,
                 "local rank {} is not in [0, LOCAL_WORLD_SIZE={}); check the launcher's "
                 "LOCAL_RANK and LOCAL_WORLD_SIZE",
                 local_rank, local_world_size);
  DeviceAssignment a;
  a.local_rank = local_rank;
  // CUDA reports what it can use; a list longer than the machine's GPUs (or
  // hiding them all) is already reflected in device_count.
  const int gpus = std::max(device_count, 0);
  if (kind == DeviceKind::kCpu) return a;
  if (kind == DeviceKind::kCuda && (gpus == 0 || local_world_size > gpus)) {
    core::raise<ConfigError>(
        "local rank {}: the program asked for a GPU per process (--device cuda, DeviceKind::kCuda) "
        "with LOCAL_WORLD_SIZE={} processes on this node but {} GPU(s) are visible ({}{}); start "
        "at most one process per visible GPU (rankwise-run --nproc-per-node gpu) or use --device "
        "auto or cpu (DeviceKind::kAuto or kCpu)",
        local_rank, local_world_size, gpus, describe(visible),
        (gpus == 0 ? ", or CUDA is not available in this libtorch" : ""));
  }
  if (gpus == 0 || local_world_size > gpus) return a;  // kAuto: the CPU for every rank
  a.visible_index = local_rank;
  a.physical = visible && static_cast<std::size_t>(local_rank) < visible->size()
                   ? (*visible)[static_cast<std::size_t>(local_rank)]
                   : std::to_string(local_rank);
  return a;
}

DeviceAssignment device_assignment(DeviceKind kind) {
  return device_assignment(
      core::process_env(), kind);
}

DeviceAssignment device_assignment(const LaunchEnv& env, DeviceKind kind) {
  if (kind == DeviceKind::kCpu)
    return assign_device(env.local_rank, env.local_world_size, 0, {}, kind);
  const auto visible = parse_cuda_visible_devices(get_env(kVariable));
  const int count =
      torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  // --virtual-local-rank: this worker's GPU is the only one it sees.
  if (env.virtual_local_rank) {
    RANKWISE_CHECK(kind != DeviceKind::kCuda || count >= 1, ConfigError,
                   "local rank {}: the program asked for a GPU (--device cuda, "
                   "DeviceKind::kCuda) under rankwise-run --virtual-local-rank, which shows each "
                   "worker only its own GPU, but this worker sees none ({}{}); give the machine a "
                   "GPU per worker (--nproc-per-node gpu) or use --device auto or cpu",
                   env.local_rank, describe(visible),
                   torch::cuda::is_available() ? "" : ", or CUDA is not available in this libtorch");
    return assign_device(0, 1, count, visible, kind);
  }
  return assign_device(env.local_rank, env.local_world_size, count, visible, kind);
}

torch::Device device(DeviceKind kind) { return device_assignment(kind).torch_device(); }

}  // namespace rankwise
