#!/usr/bin/env bash
# tensorboard_export.sh REPORT WORK PYTHON...: runs tests/python/tensorboard_export.py
# (rankwise-report --tensorboard read back by TensorBoard's EventAccumulator)
# with the first PYTHON that has the tensorboard package (the wheel's venv);
# exit 77 (skipped) when none has.
set -uo pipefail
report=$1; work=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
for py in "$@"; do
  if [ -x "$py" ] && "$py" -c 'import tensorboard' 2>/dev/null; then
    exec "$py" "$here/../python/tensorboard_export.py" "$report" "$work"
  fi
done
echo "no Python with the tensorboard package among: $*; skipped (scripts/setup-torch-wheel installs it)"
exit 77
