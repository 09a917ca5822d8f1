#pragma once
/// \file device.h
/// Which device a worker uses: one process per GPU, local rank i on the i-th
/// visible GPU, or the CPU.
///
/// CUDA_VISIBLE_DEVICES renumbers GPUs: with CUDA_VISIBLE_DEVICES=2,3 the
/// program sees two devices, cuda:0 (physical GPU 2) and cuda:1 (physical
/// GPU 3). So local rank 0 uses cuda:0 and local rank 1 uses cuda:1; the
/// physical GPU behind each is the CUDA_VISIBLE_DEVICES entry at that
/// position. "Physical" index means CUDA's enumeration order, which follows
/// CUDA_DEVICE_ORDER (FASTEST_FIRST by default, nvidia-smi uses PCI_BUS_ID).
///
/// The variable is read through rankwise::get_env (env.h), like every other.

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "rankwise/env.h"

namespace rankwise {

/// Parses a CUDA_VISIBLE_DEVICES value.
///
/// Returns:
/// - nullopt when `value` is nullopt (variable unset): every GPU is visible,
///   in CUDA's order;
/// - an empty list for "" or "-1" (the usual ways to hide every GPU);
/// - otherwise the entries, in order, with spaces and tabs around each
///   trimmed. An entry is a device index ("2"), a GPU UUID or a unique prefix
///   of one ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-8932f937"), or a
///   MIG instance ("MIG-<uuid>" or the older "MIG-GPU-<uuid>/<gi>/<ci>").
///
/// CUDA's own rule is lenient: it uses the entries up to the first invalid
/// one and silently ignores the rest ("0,x,1" means only GPU 0; "0,-1,1"
/// likewise). rankwise instead throws ConfigError naming the variable, the
/// whole value and the first bad entry, for: an empty entry ("1,,2", "1,"),
/// an entry that is neither an index nor a UUID ("a,1", "-1" inside a list,
/// "+1"), a UUID prefix with nothing or non-hex characters after it, and a
/// repeated entry ("1,1"). (The launcher's `--nproc-per-node gpu` counts with
/// CUDA's rule, since it only counts.)
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

/// The mapping, as a pure function (used by device() and by the tests).
///
/// `local_rank` in [0, local_world_size); `device_count` is the number of
/// GPUs CUDA reports (torch::cuda::device_count(); 0 when CUDA is not
/// available); `visible` is parse_cuda_visible_devices() of the variable.
/// Rule: local rank i uses cuda:i and the physical GPU visible[i] (or i when
/// `visible` is nullopt); see DeviceKind for when the CPU is used instead.
/// Throws ConfigError (kCuda only) naming LOCAL_WORLD_SIZE, the number of
/// visible GPUs and CUDA_VISIBLE_DEVICES, or ConfigError for a local rank
/// outside [0, local_world_size).
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
