#!/usr/bin/env bash
# gpt_fortunes.sh RUN PROGRAM WORKDIR: the byte-level GPT on Debian's fortunes
# under --strategy fsdp at 2 ranks, small (2 blocks of width 64, windows of
# 32 bytes), 30 steps: it exits 0, its validation loss is below the
# byte-uniform ln(256) = 5.545, each rank prints its peak memory, a sharded
# checkpoint is written; then --resume continues with a second epoch of 40
# steps from that checkpoint (step 30) to step 70. Skipped (77) without the
# fortunes package; a missing --data-dir exits 2 naming it.
set -uo pipefail
run=$1; program=$2; work=$3
fail() { echo "FAIL: $*"; exit 1; }
[ -d /usr/share/games/fortunes ] || { echo "SKIP: the Debian package fortunes is not installed (run scripts/setup)"; exit 77; }
rm -rf "$work"; mkdir -p "$work"
ckpt="$work/ckpt"
small=(--strategy fsdp --layers 2 --d-model 64 --context 32 --checkpoint-dir "$ckpt" --progress off)

# Peak-memory and validation lines: present once per rank / once, loss below ln(256).
check_run() {  # OUT EPOCH
  local out=$1 epoch=$2
  for r in 0 1; do
    [ "$(grep -cE "^\[rank$r\]: peak memory \(VmHWM\) [0-9]+\.[0-9] MiB \| parameters [0-9]+ \([0-9]+ held by this rank\) \| strategy fsdp$" <<<"$out")" = 1 ] \
      || fail "rank $r's peak-memory line: $out"
  done
  grep -qE "^\[rank0\]: epoch $epoch/$epoch \| train loss [0-9.]+ \| validation loss [0-9.]+ " <<<"$out" || fail "epoch $epoch line: $out"
  local loss
  loss=$(sed -nE 's/^\[rank0\]: final validation loss ([0-9.]+)$/\1/p' <<<"$out")
  [ -n "$loss" ] || fail "no final validation loss line: $out"
  awk -v l="$loss" 'BEGIN { exit !(l < 5.545) }' || fail "validation loss $loss not below ln(256) = 5.545"
  grep -q '^\[rank0\]: sample (greedy, 200 bytes after "The "):$' <<<"$out" || fail "no sample: $out"
  grep -q '^\[rank1\]: \(final validation\|sample\)' <<<"$out" && fail "rank 1 printed rank 0's lines"
}

out=$("$run" --nproc-per-node 2 "$program" "${small[@]}" --max-steps 30 2>&1) || fail "run: $out"
echo "$out"
check_run "$out" 1
[ "$(cat "$ckpt/latest" 2>/dev/null)" = checkpoint-0000000030 ] || fail "latest checkpoint is not step 30's: $(ls "$ckpt")"
[ -d "$ckpt/checkpoint-0000000030" ] || fail "no sharded checkpoint directory of step 30: $(ls "$ckpt")"
[ -s "$ckpt/metrics.jsonl" ] || fail "no metrics log beside the checkpoints"

out2=$("$run" --nproc-per-node 2 "$program" "${small[@]}" --epochs 2 --max-steps 40 --resume 2>&1) || fail "resume: $out2"
echo "$out2"
grep -q "^\[rank0\]: resumed from $ckpt/checkpoint-0000000030 at step 30 " <<<"$out2" || fail "resume line: $out2"
grep -q 'epoch 1/2' <<<"$out2" && fail "epoch 1 ran again after the resume"
grep -qE '^\[rank0\]: epoch 2/2 .* \| 40 steps, ' <<<"$out2" || fail "40 steps in epoch 2: $out2"
check_run "$out2" 2
[ "$(cat "$ckpt/latest")" = checkpoint-0000000070 ] || fail "latest checkpoint is not step 70's: $(ls "$ckpt")"

# Without the text: exit 2 (one process; the launcher reports it as a failure), naming the package.
out3=$("$program" --data-dir "$work/no-such-dir" --checkpoint-dir "$work/none" 2>&1)
rc=$?
[ $rc = 2 ] || fail "a missing --data-dir exited $rc, expected 2: $out3"
grep -q "is not a directory; the fortune files come with the Debian package fortunes (apt-get install fortunes" <<<"$out3" \
  || fail "a missing --data-dir does not name the package: $out3"
[ -e "$work/none" ] && fail "a missing --data-dir created the checkpoint directory"
echo PASS
