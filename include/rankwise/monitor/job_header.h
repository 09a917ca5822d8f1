#pragma once
/// \file job_header.h
/// The job's header: versions, world size, backend, and one line per rank.

namespace rankwise::monitor {

/// Prints the sanity header on rank 0: rankwise and libtorch versions, CUDA, visible GPUs, the
/// CRC-32 implementation, world size and backend, then one line per rank (local rank, host,
/// pid, device, physical GPU; "-" on the CPU, "?" for an invalid CUDA_VISIBLE_DEVICES).
/// Collective: every rank, same point, after dist::init() (one 256-byte all_gather per rank,
/// longer host names cut). Without dist::init() it prints this process's line only.
/// Example output: docs/getting-started.md.
void print_header();

}  // namespace rankwise::monitor
