#pragma once
/// \file throughput.h
/// Model FLOPs utilisation (MFU): `samples/s * FLOPs per sample / (devices * peak)`. FLOPs per
/// sample are the user's or counted for Linear models; the peak comes from a table of common
/// GPUs or a short matmul measurement. See docs/monitoring.md#throughput-and-mfu.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace rankwise::monitor {

/// FLOPs to train on one sample (forward and backward: 3 times the forward's
/// 2 * in * out per Linear layer; a Linear applied to a sequence counts once
/// per input row). Local. Throws ConfigError naming the first submodule with
/// parameters it cannot count (e.g. Conv2d, whose cost depends on the input's
/// size): give FabricOptions::flops_per_sample instead.
double training_flops_per_sample(const torch::nn::Module& model);

/// The dense peak FLOP/s of a GPU named `gpu_name` (as CUDA names it, e.g.
/// "NVIDIA H100 80GB HBM3") computing in `dtype` (bfloat16 and float16:
/// tensor cores; float32: without TF32), from the table in
/// docs/monitoring.md; nullopt for a GPU or dtype the table lacks. Local.
std::optional<double> gpu_peak_flops(const std::string& gpu_name, c10::ScalarType dtype);

/// The name CUDA gives device `index` ("" when it cannot be read). Local.
std::string gpu_name(int index);

/// FLOP/s of square matmuls in `dtype` on `device`, measured for about
/// `budget` (the best of several timed runs). Local; on the CPU it measures
/// the cores this process gets, with the other ranks running.
double measure_matmul_flops(torch::Device device, c10::ScalarType dtype,
                            std::chrono::milliseconds budget = std::chrono::milliseconds(300));

/// The peak FLOP/s MFU is measured against: the table's for a known GPU,
/// else measure_matmul_flops() for `budget`. Local.
double peak_flops(torch::Device device, c10::ScalarType dtype,
                  std::chrono::milliseconds budget = std::chrono::milliseconds(300));

}  // namespace rankwise::monitor
