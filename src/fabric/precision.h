#pragma once
// FabricOptions::precision as each strategy carries it out: autocast of the
// loaders' batches (ddp, zero1), FullyShardedDataParallel's mixed-precision
// policy (fsdp, whose engine casts), or a bfloat16 model (bf16-true).
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>

#include "rankwise/fabric.h"

namespace rankwise::fabric {

// The dtype a mixed precision autocasts to; none under fsdp.
std::optional<c10::ScalarType> autocast_dtype(const FabricOptions& options);
// The dtype of the parameters and floating-point batches under bf16-true.
std::optional<c10::ScalarType> true_dtype(const FabricOptions& options);
// The precision's compute dtype: what MFU's peak is measured in.
c10::ScalarType compute_dtype(const FabricOptions& options);

// FabricOptions::fsdp with the precision's mixed-precision policy:
// bf16-mixed gathers and computes in bfloat16, 16-mixed in float16, both
// reducing gradients in float32. Throws ConfigError for bf16-true (FSDP
// keeps float32 shards) and for a policy of the user's own beside a mixed
// precision.
parallel::FullyShardOptions fsdp_options_for(const FabricOptions& options);

// Throws ConfigError when this libtorch cannot compute in the mixed
// precision's dtype on `device` (1.13: float16 on the CPU).
void check_precision_support(const FabricOptions& options, const c10::Device& device);

}  // namespace rankwise::fabric
