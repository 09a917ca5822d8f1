#include "rankwise/monitor/throughput.h"

#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>

#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::monitor {
namespace {

// Modules without arithmetic worth counting against the matmuls (their
// elementwise cost is left out, as MFU conventions do).
bool is_negligible(const std::string& type) {
  for (const char* name : {"BatchNorm", "LayerNorm", "GroupNorm", "InstanceNorm", "Embedding"}) {
    if (type.find(name) != std::string::npos) return true;
  }
  return false;
}

struct GpuPeak {
  const char* name;    // a substring of CUDA's device name
  double half;         // bfloat16 / float16, dense, tensor cores
  double single;       // float32 without TF32
};

// Dense peaks from NVIDIA's data sheets (SXM unless the name says PCIe).
constexpr std::array<GpuPeak, 5> kGpuPeaks{{
    {"H200", 989.4e12, 66.9e12},
    {"H100 PCIe", 756.5e12, 51.2e12},
    {"H100", 989.4e12, 66.9e12},
    {"A100", 312e12, 19.5e12},
    {"L40S", 362.05e12, 91.6e12},
}};

}  // namespace

double training_flops_per_sample(const torch::nn::Module& model) {
  double forward = 0;
  for (const auto& item : model.named_modules("model")) {
    const auto& module = *item.value();
    if (module.named_parameters(/*recurse=*/false).is_empty()) continue;
    if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(&module)) {
      forward += 2.0 * static_cast<double>(linear->weight.numel());
      continue;
    }
    if (is_negligible(module.name())) continue;
    core::raise<ConfigError>(
        "cannot count the FLOPs of {} ({}): only Linear layers are counted, as the cost of other "
        "layers depends on their input's size; give FabricOptions::flops_per_sample "
        "(--flops-per-sample) for this model",
        item.key(), module.name());
  }
  return 3.0 * forward;
}

std::optional<double> gpu_peak_flops(const std::string& gpu_name, c10::ScalarType dtype) {
  for (const auto& peak : kGpuPeaks) {
    if (gpu_name.find(peak.name) == std::string::npos) continue;
    if (dtype == torch::kBFloat16 || dtype == torch::kHalf) return peak.half;
    if (dtype == torch::kFloat32) return peak.single;
    return std::nullopt;
  }
  return std::nullopt;
}

std::string gpu_name(int index) {
  // The driver API's name, through the libcuda that a CUDA libtorch loaded.
  using GetName = int (*)(char*, int, int);
  void* cuda = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (cuda == nullptr) return "";
  auto get_name = reinterpret_cast<GetName>(::dlsym(cuda, "cuDeviceGetName"));
  std::array<char, 256> name{};
  const bool ok = get_name != nullptr && get_name(name.data(), name.size(), index) == 0;
  ::dlclose(cuda);
  return ok ? std::string(name.data()) : "";
}

double measure_matmul_flops(torch::Device device, c10::ScalarType dtype,
                            std::chrono::milliseconds budget) {
  torch::NoGradGuard no_grad;
  const int64_t n = device.is_cpu() ? 512 : 4096;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  // Constant matrices: drawing random ones would move the program's generator.
  const auto a = torch::full({n, n}, 0.5, options), b = torch::full({n, n}, 0.25, options);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  torch::matmul(a, b);  // warm-up
  sync();
  double best = 0;
  const auto until = std::chrono::steady_clock::now() + budget;
  do {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) torch::matmul(a, b);
    sync();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 4 * 2.0 * static_cast<double>(n * n * n) / seconds);
  } while (std::chrono::steady_clock::now() < until);
  return best;
}

double peak_flops(torch::Device device, c10::ScalarType dtype, std::chrono::milliseconds budget) {
  if (device.is_cuda()) {
    if (auto peak = gpu_peak_flops(gpu_name(device.index() < 0 ? 0 : device.index()), dtype)) return *peak;
  }
  return measure_matmul_flops(device, dtype, budget);
}

}  // namespace rankwise::monitor
