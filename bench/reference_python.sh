# Sourced by the bench scripts: reference_python BUILD prints the Python whose
# torch PyTorch's side runs on: the RANKWISE_PYTHON of BUILD's CMake cache
# (Debian's python3-torch for build/, the wheel's venv for build-wheel/), so
# each libtorch is compared with the PyTorch of the same version.
reference_python() {
  local py
  py=$(sed -n 's/^RANKWISE_PYTHON:FILEPATH=//p' "$1/CMakeCache.txt" 2>/dev/null)
  echo "${py:-/usr/bin/python3}"
}
