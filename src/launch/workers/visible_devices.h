#pragma once
/// \file visible_devices.h
/// Counting the CPU cores and GPUs a node offers, for `--nproc-per-node
/// cpu|gpu|auto`. No CUDA runtime is needed: GPUs are counted from the NVIDIA
/// driver's /proc entries and CUDA_VISIBLE_DEVICES.

#include <optional>
#include <string>

namespace rankwise::launch::workers {

/// Number of CPU cores available to this process (sched_getaffinity; at least 1).
int cpu_core_count();

/// Number of GPUs a worker would see: the entries of /proc/driver/nvidia/gpus
/// (0 when absent: no NVIDIA driver), restricted by `cuda_visible_devices`
/// when given (torch's rule: the list ends at the first invalid entry; "" or
/// "-1" hide every GPU).
int visible_gpu_count(const std::optional<std::string>& cuda_visible_devices,
                      const std::string& proc_gpus_dir = "/proc/driver/nvidia/gpus");

}  // namespace rankwise::launch::workers
