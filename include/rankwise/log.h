#pragma once
/// \file log.h
/// Rank-aware printing (a plain print appears once per rank; the launcher tags each line).
/// print0() guards the *output* only: its arguments are evaluated on every rank, and any
/// computation, collectives included, must happen outside it, on every rank. Never put a
/// collective inside `if (rank() == 0)`.

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

}  // namespace rankwise
