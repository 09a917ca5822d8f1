#pragma once
// Test helpers shared by the unit tests.
#include <cstdio>
#include <ostream>
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

/// A Python interpreter (a path), followed by a space. The default is the one
/// whose torch is the reference (CMake's RANKWISE_PYTHON: Debian's
/// /usr/bin/python3 with python3-torch 1.13, or the venv of the libtorch the
/// tests were built against); the interop tests also run with
/// RANKWISE_OTHER_PYTHON, whose torch is the other supported version.
inline std::string python(const std::string& interpreter = RANKWISE_PYTHON) {
  return interpreter + " ";
}

/// Whether that interpreter exists and can import torch.
inline bool have_python_torch(const std::string& interpreter = RANKWISE_PYTHON) {
  return shell(python(interpreter) + "-c 'import torch' 2>/dev/null && echo yes").find("yes") !=
         std::string::npos;
}

/// The interpreters the interop tests run with, as GoogleTest parameters:
/// the matching torch ("SameTorch") and the other supported one ("OtherTorch").
struct ReferencePython {
  const char* name;
  const char* interpreter;
};
inline const ReferencePython kReferencePythons[] = {{"SameTorch", RANKWISE_PYTHON},
                                                    {"OtherTorch", RANKWISE_OTHER_PYTHON}};
inline std::string reference_python_name(const ReferencePython& p) { return p.name; }
/// GoogleTest prints parameters in the listing ctest names tests from: the
/// name, not the bytes (pointers, different every run).
inline void PrintTo(const ReferencePython& p, std::ostream* os) { *os << p.name; }

}  // namespace rankwise::test
