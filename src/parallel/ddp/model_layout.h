#pragma once
// DistributedDataParallel's first check: every rank holds the same
// parameters (count, shapes, dtypes), so that a wrong model fails on every
// rank at once, naming the parameter, instead of on one rank while the
// others fail later with "a peer exited".
#include <torch/types.h>

#include <string>
#include <vector>

#include "rankwise/dist/process_group.h"

namespace rankwise::parallel::ddp {

/// Collective (every rank; two all_gathers). Throws ConfigError on every
/// rank when some rank's parameters differ from rank 0's in number, shape
/// or dtype, naming the first differing parameter (by this rank's `names`)
/// and the ranks that differ.
void check_same_parameter_layout(dist::ProcessGroup& group, const std::vector<torch::Tensor>& params,
                                 const std::vector<std::string>& names);

}  // namespace rankwise::parallel::ddp
