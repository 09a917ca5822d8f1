#include "fabric/precision.h"

#include <torch/version.h>

#include "compat/autocast.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::fabric {
namespace {

bool under_fsdp(const FabricOptions& options) { return options.strategy() == "fsdp"; }

// The dtype a mixed precision computes in, whoever casts.
std::optional<c10::ScalarType> mixed_dtype(const FabricOptions& options) {
  if (options.precision() == "bf16-mixed") return c10::ScalarType::BFloat16;
  if (options.precision() == "16-mixed") return c10::ScalarType::Half;
  return std::nullopt;
}

}  // namespace

std::optional<c10::ScalarType> autocast_dtype(const FabricOptions& options) {
  if (under_fsdp(options)) return std::nullopt;
  return mixed_dtype(options);
}

std::optional<c10::ScalarType> true_dtype(const FabricOptions& options) {
  if (options.precision() == "bf16-true") return c10::ScalarType::BFloat16;
  return std::nullopt;
}

c10::ScalarType compute_dtype(const FabricOptions& options) {
  if (under_fsdp(options)) return options.fsdp().mixed_precision().param_dtype().value_or(c10::ScalarType::Float);
  return autocast_dtype(options).value_or(true_dtype(options).value_or(c10::ScalarType::Float));
}

parallel::FullyShardOptions fsdp_options_for(const FabricOptions& options) {
  auto fsdp = options.fsdp();
  if (true_dtype(options)) {
    core::raise<ConfigError>(
        "precision bf16-true under strategy fsdp: FullyShardedDataParallel keeps float32 shards "
        "(and optimizer state) and computes in the dtype of its mixed-precision policy; use "
        "bf16-mixed, which gathers and computes in bfloat16");
  }
  const auto dtype = mixed_dtype(options);
  if (!dtype) return fsdp;  // 32-true: the user's policy, if any
  const auto& own = fsdp.mixed_precision();
  if (own.param_dtype() || own.reduce_dtype() || own.output_dtype()) {
    core::raise<ConfigError>(
        "precision {} under strategy fsdp sets FabricOptions::fsdp's mixed_precision itself; give "
        "either the precision or a mixed_precision policy of your own (with precision 32-true)",
        options.precision());
  }
  // The output in float32: the loss is computed in float32, as autocast computes it under ddp.
  fsdp.mixed_precision(parallel::MixedPrecisionPolicy()
                           .param_dtype(*dtype)
                           .reduce_dtype(c10::ScalarType::Float)
                           .output_dtype(c10::ScalarType::Float));
  return fsdp;
}

void check_precision_support(const FabricOptions& options, const c10::Device& device) {
  const auto dtype = mixed_dtype(options);
  if (!dtype || compat::autocast_supports(device.type(), *dtype)) return;
  core::raise<ConfigError>(
      "precision {}: this libtorch ({}) cannot {} {} on {}; use bf16-mixed (or 32-true){}",
      options.precision(), TORCH_VERSION, under_fsdp(options) ? "compute in" : "autocast to",
      *dtype == c10::ScalarType::Half ? "float16" : "bfloat16", device.str(),
      device.is_cpu() ? ", or a GPU (--device cuda)" : "");
}

}  // namespace rankwise::fabric
