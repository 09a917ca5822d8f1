#pragma once
// Checked collectives: before each collective, every rank exchanges what it is
// about to call (sequence number, operation, dtype, shape, root, reduce op,
// call site) in one small all_gather (ProcessGroup::check_call,
// src/dist/process_group.cpp), so that ranks that are out of step fail at once, on
// every rank, with an error that names each rank's call and source line,
// instead of pairing unrelated collectives or waiting for the timeout.
// PyTorch does the same under TORCH_DISTRIBUTED_DEBUG=DETAIL (c10d's
// ProcessGroupWrapper), without call sites.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rankwise::dist {

/// One rank's description of a collective it is about to run.
struct CollectiveCall {
  std::string operation;  ///< "all_reduce", "broadcast", "all_gather", "barrier"
  torch::Tensor tensor;   ///< undefined for barrier
  int root = -1;          ///< broadcast's root; -1 otherwise
  std::string reduce_op;  ///< all_reduce's "sum", "avg", "min", "max"; "" otherwise
  std::string file;       ///< call site (only its last path component is sent)
  uint32_t line = 0;
};

/// The fixed-size record of `call` exchanged between ranks: int64 [32]
/// (sequence, operation, dtype, number of dimensions, root, number of
/// elements, the first 10 sizes, reduce op, line, then up to 112 bytes of
/// the file name). Ranks must agree on everything but the call site.
torch::Tensor encode_call(const CollectiveCall& call, uint64_t sequence);

/// Human-readable form of a record: "all_reduce #3 (Float [4, 2], sum) at
/// train.cpp:88" (c10 dtype names).
std::string describe_call(const torch::Tensor& record);

/// Given every rank's record (rank order), the CollectiveMismatchError text
/// to raise, or "" when every rank called the same collective. `where` is
/// this rank ("rank 1/3").
std::string mismatch_message(const std::string& where, const std::vector<torch::Tensor>& records);

}  // namespace rankwise::dist
