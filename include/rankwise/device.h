#pragma once
/// \file device.h
/// Which device a worker uses: one process per GPU (local rank i on visible cuda:i, the
/// physical GPU being the CUDA_VISIBLE_DEVICES entry at i, read through get_env), or the CPU.
/// See docs/gpu.md#which-device-each-rank-uses.

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "rankwise/env.h"

namespace rankwise {

/// Parses a CUDA_VISIBLE_DEVICES value: nullopt when unset (every GPU, CUDA's order); empty
/// for "" or "-1"; else the trimmed entries in order (an index, a GPU UUID or unique prefix,
/// or a MIG instance). Unlike CUDA's lenient rule, throws ConfigError naming the variable, the
/// value and the first bad entry: empty, neither index nor UUID, a bad UUID prefix, repeated.
std::optional<std::vector<std::string>> parse_cuda_visible_devices(
    const std::optional<std::string>& value);

/// What the program asks for.
enum class DeviceKind {
  /// GPUs when CUDA is available and every local rank gets its own GPU
  /// (LOCAL_WORLD_SIZE <= visible GPUs), else the CPU for every rank. It never
  /// places some ranks of a node on GPUs and others on the CPU.
  kAuto,
  /// A GPU per local rank; ConfigError when CUDA is unavailable or there are
  /// more processes on the node than visible GPUs.
  kCuda,
  /// The CPU, whatever GPUs exist.
  kCpu,
};

/// A worker's device, and the physical GPU behind it.
struct DeviceAssignment {
  int local_rank = 0;
  /// Index of the device as the program sees it (cuda:visible_index); -1 on the CPU.
  int visible_index = -1;
  /// The physical GPU: the CUDA_VISIBLE_DEVICES entry at visible_index (an
  /// index or a UUID), or visible_index itself when the variable is unset;
  /// "-" on the CPU.
  std::string physical = "-";

  bool is_cuda() const { return visible_index >= 0; }
  /// "cuda:<visible_index>" or "cpu".
  std::string device_string() const;
  /// The same as a torch::Device.
  torch::Device torch_device() const;
};

/// The mapping as a pure function: local rank i (in [0, local_world_size)) uses cuda:i and
/// physical GPU visible[i] (or i when `visible` is nullopt), or the CPU (see DeviceKind);
/// `device_count` is CUDA's GPU count (0 without CUDA). Throws ConfigError for a local rank
/// out of range, or (kCuda) too few GPUs, naming LOCAL_WORLD_SIZE, the count and the variable.
DeviceAssignment assign_device(int local_rank, int local_world_size, int device_count,
                               const std::optional<std::vector<std::string>>& visible,
                               DeviceKind kind = DeviceKind::kAuto);

/// This worker's assignment: local rank and local world size from the process
/// group (or the environment, see env.h), CUDA_VISIBLE_DEVICES through
/// get_env, the GPU count from torch::cuda. Any rank, no communication.
/// Throws ConfigError as parse_cuda_visible_devices() and assign_device() do.
DeviceAssignment device_assignment(DeviceKind kind = DeviceKind::kAuto);
/// The same for the worker described by `env` (its local rank and local
/// world size), e.g. before the process group exists.
DeviceAssignment device_assignment(const LaunchEnv& env, DeviceKind kind = DeviceKind::kAuto);

/// This worker's device: cuda:LOCAL_RANK when CUDA is available and every
/// local rank gets its own visible GPU, else the CPU (see DeviceKind). Put
/// the model and the batches there: `model->to(rankwise::device())`.
/// Any rank, no communication. Throws ConfigError as device_assignment().
torch::Device device(DeviceKind kind = DeviceKind::kAuto);

}  // namespace rankwise
