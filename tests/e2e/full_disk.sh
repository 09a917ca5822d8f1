#!/usr/bin/env bash
# full_disk.sh RUN PROGRAM CKPT_TOOL WORK: the main job (examples/fashion_mnist)
# under a file size limit (`ulimit -f`, inherited by the launcher and the
# ranks), which stops each file at the limit as a full disk does.
# (1) Logs: with a 4 KiB limit (and SIGXFSZ ignored, as a full disk sends
# none), metrics.jsonl, metrics.csv and the TensorBoard file outgrow it: the
# run exits 0, one warning per file names it and the reason, and each file
# holds whole records only (every JSON line parses, every CSV row has 6
# fields, the event file ends on a record). (2) A checkpoint: a resumed run
# whose next checkpoint (1.9 MB) outgrows a 1 MiB limit fails with a
# CheckpointError naming the limit as its root cause (not SIGXFSZ), and the
# previous checkpoint stays latest and verifies.
set -uo pipefail
run=$1; program=$2; ckpt_tool=$3; work=$4
python=${RANKWISE_PYTHON:-python3}
fail() { echo "FAIL: $*"; exit 1; }
if [ ! -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
  echo "dataset-fashion-mnist is not installed (run scripts/setup)"; exit 1
fi
# SIGXFSZ ignored already (bit 25 of SigIgn) would hide what rankwise must do itself.
ignored=$(awk '/^SigIgn:/ { print $2 }' /proc/$$/status)
(( (16#$ignored >> 24) & 1 )) && { echo "skipped: SIGXFSZ is ignored by the caller"; exit 77; }
rm -rf "$work"; mkdir -p "$work"; cd "$work" || fail "cd $work"

# (1) 1000 samples, 16 per batch, a step record each step: ~12 KB of JSON;
# no checkpoint (one would outgrow the limit too). SIGXFSZ ignored, as on a
# full disk: the write that meets the limit is short, the next fails.
logs="$work/logs"
out=$(trap '' XFSZ && ulimit -f 4 && "$run" --nproc-per-node 2 "$program" --epochs 1 --limit 1000 --batch-size 16 \
  --progress-every 1 --checkpoint-dir "" --metrics-dir "$logs" 2>&1) || fail "run with full logs: $out"
grep -q "epoch 1/1 | train loss" <<<"$out" || fail "training did not finish: $out"
events=$(ls "$logs"/events.out.tfevents.*)
for file in "$logs/metrics.jsonl" "$logs/metrics.csv" "$events"; do
  n=$(grep -cF "rankwise: warning: cannot write to '$file': File too large: the file reached this process's file size limit (RLIMIT_FSIZE) of 4096 bytes" <<<"$out")
  [ "$n" = 1 ] || fail "$n warnings for $file, not 1: $out"
  [ "$(stat -c %s "$file")" -le 4096 ] || fail "$file is larger than the limit"
done
"$python" - "$logs/metrics.jsonl" "$logs/metrics.csv" "$events" <<'EOF' || fail "a torn record (above)"
import csv, json, struct, sys
jsonl, table, events = sys.argv[1:]
records = [json.loads(line) for line in open(jsonl)]  # raises on a torn line
assert records[0]["kind"] == "config" and len(records) > 3, records
assert open(jsonl).read().endswith("\n")
rows = list(csv.reader(open(table, newline="")))
assert rows[0] == ["kind", "step", "epoch", "time", "name", "value"], rows[0]
assert all(len(row) == 6 for row in rows), [row for row in rows if len(row) != 6]
data, at = open(events, "rb").read(), 0
while at < len(data):
    (length,) = struct.unpack_from("<Q", data, at)
    at += 8 + 4 + length + 4
assert at == len(data), f"the event file ends inside a record ({at} > {len(data)})"
print(f"ok: {len(records)} JSON records, {len(rows)} CSV rows, an event file of {len(data)} bytes")
EOF

# (2) A checkpoint of epoch 1 (1.9 MB), then the resumed epoch 2's under 1 MiB.
ck="$work/ckpt"
out=$("$run" --nproc-per-node 2 "$program" --epochs 1 --limit 200 --checkpoint-dir "$ck" 2>&1) || fail "epoch 1: $out"
last=$(cat "$ck/latest")
out=$(ulimit -f 1024 && "$run" --nproc-per-node 2 "$program" --epochs 2 --limit 200 --checkpoint-dir "$ck" --resume 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "exit code $rc, not 1: $out"
grep -q "SIGXFSZ" <<<"$out" && fail "a rank was killed by SIGXFSZ: $out"
grep -qF "root cause (first failure): rank " <<<"$out" || fail "no root cause: $out"
error=$(sed -n '/root cause (first failure)/,/^rankwise-run: =====/p' <<<"$out" | grep -m1 '^  error: ')
grep -qF "checkpoint write of '$ck/checkpoint-0000000004.pt' failed at write: File too large: the file reached this process's file size limit (RLIMIT_FSIZE) of 1048576 bytes (\`ulimit -f\` 1024); raise it" <<<"$error" ||
  fail "the root cause is not the file size limit: $out"
[ "$(cat "$ck/latest")" = "$last" ] || fail "latest moved from $last to $(cat "$ck/latest")"
ls "$ck" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$ck")"
"$ckpt_tool" verify "$ck/$last" >/dev/null || fail "the previous checkpoint $last does not verify"
echo "ok: $last kept; the root cause names the file size limit"
