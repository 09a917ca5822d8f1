#pragma once
/// \file job_header.h
/// The job's header: versions, world size, backend, and one line per rank.

namespace rankwise::monitor {

/// The sanity header, printed by rank 0 only. First line: rankwise and libtorch
/// versions, CUDA availability, number of visible GPUs, the CRC-32
/// implementation built (ISA-L, or zlib where ISA-L was not found), world size
/// and backend:
///
///     rankwise 0.1.0 | libtorch 1.13.0 | CUDA available: no | GPUs visible: 0 | CRC-32: ISA-L | world size: 2 | backend: gloo
///
/// then one line per rank, in rank order, with its local rank, host, pid, the
/// device as the program sees it (rankwise::device_assignment(): cuda:i or cpu) and the
/// physical GPU behind it (see rankwise/device.h; "-" on the CPU, "?" when
/// CUDA_VISIBLE_DEVICES is invalid):
///
///       rank 1 | local rank 1 | host node0 | pid 4242 | device cuda:1 | physical GPU 3
///
/// Collective: every rank must call it, at the same point, after dist::init(); the
/// per-rank facts are gathered with one all_gather of 256 bytes per rank
/// (longer host names are cut). Without dist::init() it prints this process's line
/// only, and nothing is communicated.
void print_header();

}  // namespace rankwise::monitor
