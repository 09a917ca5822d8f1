#pragma once
// Test helpers shared by the unit tests.
#include <cstdio>
#include <string>

namespace rankwise::test {

/// Runs `command` with /bin/sh; returns its standard output (append 2>&1 for stderr).
inline std::string shell(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

/// The Python interpreter whose torch is the reference (CMake's
/// RANKWISE_PYTHON: Debian's /usr/bin/python3 with python3-torch 1.13, or the
/// venv of the libtorch the tests were built against), followed by a space.
inline std::string python() { return std::string(RANKWISE_PYTHON) + " "; }

/// Whether that interpreter can import torch.
inline bool have_python_torch() {
  return shell(python() + "-c 'import torch' 2>/dev/null && echo yes").find("yes") !=
         std::string::npos;
}

}  // namespace rankwise::test
