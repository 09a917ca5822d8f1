#!/usr/bin/env bash
# checkpoint_tool.sh TOOL WRITER WORK: the rankwise-ckpt program end to end
# (its commands, exit 0 included, are tested in-process in
# tests/unit/checkpoint/tool/; each start of a program linking libtorch
# costs most of a second): a checkpoint written by
# tests/programs/torch_checkpoint_writer with one byte flipped fails
# `verify` (exit 1, naming the file), and an unknown command is one line on
# stderr, exit 2.
set -uo pipefail
tool=$1; writer=$2; work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
"$writer" plain "$work/c.pt" 1 >/dev/null || fail "torch_checkpoint_writer failed"
# Invert byte 100 000 (inside the payload's data).
byte=$(od -An -tu1 -j 100000 -N1 "$work/c.pt" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 255)))" | dd of="$work/c.pt" bs=1 seek=100000 conv=notrunc status=none
out=$("$tool" verify "$work/c.pt" 2>&1); status=$?
[ $status -eq 1 ] || fail "verify of a damaged checkpoint: exit $status, not 1: $out"
grep -q "^FAILED: rankwise: .*$work/c.pt" <<<"$out" || fail "verify does not name the file: $out"
"$tool" frobnicate >"$work/stdout" 2>"$work/stderr"; status=$?
[ $status -eq 2 ] || fail "an unknown command: exit $status, not 2"
[ ! -s "$work/stdout" ] && [ "$(wc -l <"$work/stderr")" -eq 1 ] || fail "an unknown command: $(cat "$work/stdout" "$work/stderr")"
grep -qF "unknown command 'frobnicate'" "$work/stderr" || fail "an unknown command: $(cat "$work/stderr")"
echo "ok"
