#!/usr/bin/env bash
# expect_lines.sh GOLDEN COMMAND...: runs COMMAND and compares its stdout with
# GOLDEN line by line, ignoring the order of lines (ranks interleave freely).
set -uo pipefail
golden=$1; shift
out=$("$@")
status=$?
if [ $status -ne 0 ]; then echo "command failed with exit code $status: $*"; echo "$out"; exit 1; fi
if ! diff <(sort "$golden") <(printf '%s\n' "$out" | sort); then
  echo "output differs from $golden (< expected, > actual)"
  exit 1
fi
echo "output matches $golden"
