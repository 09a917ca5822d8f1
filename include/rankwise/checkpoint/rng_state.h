#pragma once
/// \file rng_state.h
/// The states of libtorch's default random number generators, so that a
/// resumed run draws the same random numbers (dropout, shuffles, init) as an
/// uninterrupted one.

#include <ATen/core/ivalue.h>

namespace rankwise::checkpoint {

/// This process's generator states as a dict {"cpu": Tensor, "cuda": [Tensor, ...]}:
/// "cpu" is what Python's torch.get_rng_state() returns (uint8, 1-D, 5056 bytes
/// for the default mt19937 generator); "cuda" has one entry per visible CUDA
/// device (torch.cuda.get_rng_state(i)) and is empty without CUDA. Local: no
/// communication. Ranks usually differ, so a checkpoint keeps one per rank
/// (see capture() in training_state.h).
c10::IValue rng_state();

/// Restores what rng_state() returned: the CPU state, and the CUDA states of
/// the devices this process sees (states of more devices than it sees are
/// dropped, with a note on stderr, so a GPU run resumes on a CPU machine or
/// with another CUDA_VISIBLE_DEVICES). Throws CheckpointError when the value
/// is not such a dict.
void set_rng_state(const c10::IValue& state);

}  // namespace rankwise::checkpoint
