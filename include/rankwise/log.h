#pragma once
/// \file log.h
/// Rank-aware printing. Every rank runs the whole program, so a plain print
/// appears once per rank; the launcher tags each line with its rank.
///
/// print0() guards the *output* only: the arguments are still evaluated on
/// every rank, and any computation (including collectives) must happen
/// outside it, on every rank. Never put a collective inside `if (rank() == 0)`.

#include <fmt/format.h>

#include <string>

namespace rankwise {

/// True on global rank 0 (from the process group, else from the environment).
bool is_rank_zero();

/// Writes `line` and a newline to stdout as one write and flushes, so the
/// launcher receives whole lines promptly. Any rank.
void print_line(const std::string& line);

/// Formats with fmt (e.g. `print("loss {:.4f}", loss)`) and prints on this rank.
template <typename... Args>
void print(fmt::format_string<Args...> format, Args&&... args) {
  print_line(fmt::format(format, std::forward<Args>(args)...));
}

/// Like print(), but only rank 0 writes. The other ranks still evaluate the
/// arguments; nothing is communicated.
template <typename... Args>
void print0(fmt::format_string<Args...> format, Args&&... args) {
  std::string line = fmt::format(format, std::forward<Args>(args)...);
  if (is_rank_zero()) print_line(line);
}

/// The sanity header, printed by rank 0 only. First line: rankwise and libtorch
/// versions, CUDA availability, number of visible GPUs, world size and backend:
///
///     rankwise 0.1.0 | libtorch 1.13.0 | CUDA available: no | GPUs visible: 0 | world size: 2 | backend: gloo
///
/// then one line per rank, in rank order, with its local rank, host, pid, the
/// device as the program sees it (device_assignment(): cuda:i or cpu) and the
/// physical GPU behind it (see device.h; "-" on the CPU, "?" when
/// CUDA_VISIBLE_DEVICES is invalid):
///
///       rank 1 | local rank 1 | host node0 | pid 4242 | device cuda:1 | physical GPU 3
///
/// Collective: every rank must call it, at the same point, after init(); the
/// per-rank facts are gathered with one all_gather of 256 bytes per rank
/// (longer host names are cut). Without init() it prints this process's line
/// only, and nothing is communicated.
void print_header();

}  // namespace rankwise
