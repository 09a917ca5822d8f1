#pragma once
// Whether this libtorch's Gloo backend communicates bfloat16 tensors:
// libtorch 1.13's refuses them in broadcast and all_reduce ("Invalid scalar
// type"), 2.x's takes them (checked with 1.13 and 2.15). Used by
// src/fabric/ (precision bf16-true, whose DDP communicates bfloat16) and
// compat/sharded_collectives.cpp.
#include <torch/version.h>

namespace rankwise::compat {

inline constexpr bool kGlooCommunicatesBfloat16 = TORCH_VERSION_MAJOR >= 2;

}  // namespace rankwise::compat
