#!/usr/bin/env bash
# fashion_mnist_monitor.sh RUN PROGRAM REPORT WORK: what the main job shows
# and leaves behind. (1) In a pipe: plain progress lines from rank 0 only, no
# '\r'. (2) Its metrics log (metrics.jsonl beside the checkpoints) parses; its
# per-epoch values equal the printed ones; a resumed run appends a segment.
# (3) rankwise-report's SVG (rendered by rsvg-convert), PNG and HTML (its
# inline SVG rendered) show the curves, counted in pixels; a log without
# records shows none. (4) With --monitor, the last table shows each rank's
# real step count. (5) On a terminal (tmux, the launcher under `script`):
# one bar per epoch on the final screen, from rank 0 only, updated in place.
set -uo pipefail
run=$1; program=$2; report=$3; work=$4
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
if [ ! -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
  echo "dataset-fashion-mnist is not installed (run scripts/setup)"; exit 1
fi
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || { echo "python3-matplotlib is not installed (run scripts/setup)"; exit 77; }
command -v rsvg-convert >/dev/null || { echo "rsvg-convert is not installed (librsvg2-bin; run scripts/setup)"; exit 77; }
rm -rf "$work"; mkdir -p "$work"

# (1) In a pipe. 2000 samples over 2 ranks, 64 per batch: 16 steps per epoch,
# a reduction every 4 steps: 4 lines per epoch with --progress-interval 0.
out=$("$run" --nproc-per-node 2 "$program" --epochs 2 --limit 2000 --checkpoint-dir "$work/ckpt" \
  --progress-every 4 --progress-interval 0) || fail "run: $out"
echo "$out"
grep -q $'\r' <<<"$out" && fail "a carriage return in piped output"
n=$(grep -cE '^\[rank0\]: progress: epoch [12] of 2, step (4|8|12|16)/16 \((25|50|75|100)%\) \| [0-9]+ samples/s \| loss [0-9]+\.[0-9]{4} \| ETA [0-9]+:[0-9]{2}$' <<<"$out")
[ "$n" = 8 ] || fail "expected 8 progress lines (4 per epoch), got $n"
grep -q '^\[rank1\]: progress' <<<"$out" && fail "rank 1 printed progress"

# (2) The metrics log, against the printed epoch lines.
log="$work/ckpt/metrics.jsonl"
[ -f "$log" ] || fail "no metrics log at $log: $(ls "$work/ckpt")"
echo "$out" >"$work/run1.out"
/usr/bin/python3 - "$log" "$work/run1.out" 2 <<'EOF' || fail "metrics log"
import json, math, re, sys
log, out, epochs = sys.argv[1], open(sys.argv[2]).read(), int(sys.argv[3])
records = [json.loads(line) for line in open(log)]  # every line whole JSON
configs = [r for r in records if r["kind"] == "config"]
assert records[0]["kind"] == "config", records[0]
assert configs[0]["world_size"] == 2 and configs[0]["config"]["program"] == "fashion_mnist", configs[0]
assert configs[0]["config"]["batch_size_per_rank"] == 64 and configs[0]["config"]["train_samples"] == 2000, configs[0]
ep = [r for r in records if r["kind"] == "epoch"]
assert [r["epoch"] for r in ep] == list(range(1, epochs + 1)), ep
assert [r["step"] for r in ep] == [16 * e for e in range(1, epochs + 1)], ep
printed = re.findall(r"^\[rank0\]: epoch (\d)/\d+ \| train loss ([0-9.]+) over 2000 samples \| test accuracy ([0-9.]+), "
                     r"macro F1 ([0-9.]+) over 2000 samples \| (\d+) samples/s at world size 2$", out, re.M)
assert len(printed) >= 1, out
for e, loss, acc, f1, sps in printed:
    r = ep[int(e) - 1]["metrics"]
    got = (f"{r['train_loss']:.4f}", f"{r['test_accuracy']:.4f}", f"{r['test_macro_f1']:.4f}",
           f"{ep[int(e) - 1]['samples_per_s']:.0f}")
    assert got == (loss, acc, f1, sps), (e, got, (loss, acc, f1, sps))
    print(f"epoch {e}: printed test accuracy {acc} = logged {r['test_accuracy']!r}")
steps = [r for r in records if r["kind"] == "step"]
assert [r["step"] for r in steps][:8] == [4, 8, 12, 16, 20, 24, 28, 32], steps
assert all(math.isfinite(r["metrics"]["loss"]) and r["metrics"]["loss"] > 0 and r["samples_per_s"] > 0 for r in steps), steps
print(f"{len(records)} records, {len(configs)} config segment(s)")
EOF
out2=$("$run" --nproc-per-node 2 "$program" --epochs 3 --limit 2000 --checkpoint-dir "$work/ckpt" --resume \
  --progress-every 4) || fail "resumed run: $out2"
echo "$out2" >"$work/run2.out"
/usr/bin/python3 - "$log" "$work/run2.out" 3 <<'EOF' || fail "metrics log after the resumed run"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
configs = [i for i, r in enumerate(records) if r["kind"] == "config"]
assert len(configs) == 2, configs  # the resumed run appended its own segment
assert records[configs[1] + 1]["kind"] == "step" and records[configs[1] + 1]["epoch"] == 3, records[configs[1] + 1]
EOF
/usr/bin/python3 - "$log" "$work/run2.out" 3 <<'EOF' || fail "epoch 3 of the resumed run"
import json, re, sys
records = [json.loads(line) for line in open(sys.argv[1])]
out = open(sys.argv[2]).read()
acc = re.search(r"^\[rank0\]: epoch 3/3 \| .* test accuracy ([0-9.]+),", out, re.M).group(1)
ep = [r for r in records if r["kind"] == "epoch"]
assert [r["epoch"] for r in ep] == [1, 2, 3] and f"{ep[2]['metrics']['test_accuracy']:.4f}" == acc, (ep, acc)
EOF

# (3) The report: SVG, PNG, HTML; pixels, not file sizes.
"$report" "$log" -o "$work/report.svg" || fail "rankwise-report -o report.svg"
rsvg-convert -b white -o "$work/report.svg.png" "$work/report.svg" || fail "rsvg-convert of the SVG"
/usr/bin/python3 "$here/check_report_image.py" curves "$work/report.svg.png" || fail "SVG report"
"$report" "$log" -o "$work/report.png" || fail "rankwise-report -o report.png"
/usr/bin/python3 "$here/check_report_image.py" curves "$work/report.png" || fail "PNG report"
"$report" "$log" -o "$work/report.html" || fail "rankwise-report -o report.html"
/usr/bin/python3 - "$work/report.html" "$work/report.html.svg" "$log" <<'EOF' || fail "HTML report"
import json, re, sys
page = open(sys.argv[1]).read()
svg = page[page.index("<svg"):page.index("</svg>") + len("</svg>")]
open(sys.argv[2], "w").write(svg)
assert not re.search(r"""(src|href)=["']https?:""", page), "the report loads something from the network"
assert "<script" not in page
records = [json.loads(line) for line in open(sys.argv[3])]
for r in (r for r in records if r["kind"] == "epoch"):  # the epoch table
    assert f"<td>{r['metrics']['test_accuracy']:.6g}</td>" in page, r
assert "<td>world_size</td><td>2</td>" in page and "<td>program</td><td>fashion_mnist</td>" in page
EOF
rsvg-convert -b white -o "$work/report.html.png" "$work/report.html.svg" || fail "rsvg-convert of the HTML's SVG"
/usr/bin/python3 "$here/check_report_image.py" curves "$work/report.html.png" || fail "HTML report's picture"
head -1 "$log" >"$work/config_only.jsonl"  # the control: the same check must see no curve here
"$report" "$work/config_only.jsonl" -o "$work/empty.svg" || fail "report of a log without records"
rsvg-convert -b white -o "$work/empty.png" "$work/empty.svg" || fail "rsvg-convert of the empty report"
/usr/bin/python3 "$here/check_report_image.py" no-curves "$work/empty.png" || fail "curves drawn without records"
printf '{"kind":"st' >>"$work/config_only.jsonl"  # a run killed mid-write
"$report" "$work/config_only.jsonl" -o "$work/torn.html" || fail "report of a log with a torn last line"
# A diverged loss (written as null) is reported, not hidden as "no loss recorded".
{ head -1 "$log"
  echo '{"kind":"step","step":4,"epoch":1,"time":1,"metrics":{"loss":2.5}}'
  echo '{"kind":"step","step":8,"epoch":1,"time":2,"metrics":{"loss":null}}'
  echo '{"kind":"epoch","step":8,"epoch":1,"time":2,"metrics":{"train_loss":null}}'; } >"$work/nan.jsonl"
"$report" "$work/nan.jsonl" -o "$work/nan.html" || fail "report of a diverged run"
grep -q "loss: not finite (NaN/inf) at 1 step(s), first 8" "$work/nan.html" || fail "the non-finite loss is not named"
grep -q "<td>not finite</td>" "$work/nan.html" || fail "the epoch table hides the non-finite loss"
grep -q "no loss recorded" "$work/nan.html" && fail "a diverged loss shown as no loss"
# Not a log: a clear message and exit 2; a failed write leaves no temporary file.
head -c 3000 /bin/ls >"$work/binary.jsonl"
msg=$("$report" "$work/binary.jsonl" -o "$work/x.html" 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q "is not text" <<<"$msg" || fail "binary log: exit $rc: $msg"
mkdir -p "$work/dir.html"
"$report" "$work/nan.jsonl" -o "$work/dir.html" 2>/dev/null && fail "wrote over a directory"
[ -e "$work/dir.html.tmp" ] && fail "a failed write left dir.html.tmp"

# (4) --monitor: the table printed when the run ends shows every rank's
# real step count, 2 epochs of 16 steps (the workers' last heartbeats).
mon=$("$run" --nproc-per-node 2 --monitor=1 "$program" --epochs 2 --limit 2000 \
  --checkpoint-dir "$work/mon" 2>&1) || fail "--monitor run: $mon"
last=$(awk '/^rankwise-run: monitor at /{table=""} {table=table $0 "\n"} END{printf "%s", table}' <<<"$mon")
echo "$last"
for r in 0 1; do
  grep -qE "^rankwise-run: +$r +[^ ]+ +[^ ]+ +32 .* ended$" <<<"$last" \
    || fail "the last --monitor table does not show rank $r at step 32"
done

# (5) On a terminal: the launcher in tmux, under `script` to keep the raw bytes.
if ! command -v tmux >/dev/null || ! command -v script >/dev/null; then
  echo "tmux or script missing: terminal case skipped"; exit 77
fi
sock="rankwise-e2e-$$"
trap 'tmux -L "$sock" kill-server 2>/dev/null' EXIT
TERM=xterm tmux -L "$sock" new-session -d -x 150 -y 50 \
  "script -qfc '$run --nproc-per-node 2 $program --epochs 2 --limit 2000 --checkpoint-dir $work/tty --progress-every 2' $work/typescript; echo TERMINAL-RUN-EXIT=\$?; sleep 600" \
  || fail "tmux"
for _ in $(seq 240); do
  screen=$(tmux -L "$sock" capture-pane -p -t 0 2>/dev/null)
  grep -q 'TERMINAL-RUN-EXIT=' <<<"$screen" && break
  sleep 0.5
done
echo "--- final screen ---"; echo "$screen"; echo "---"
grep -q 'TERMINAL-RUN-EXIT=0' <<<"$screen" || fail "the run on a terminal did not end with 0"
bars=$(grep -cE '^\[rank[0-9]\]: epoch [12] of 2 \[' <<<"$screen")
[ "$bars" = 2 ] || fail "expected one bar line per epoch on the screen, found $bars"
[ "$(grep -cE '^\[rank0\]: epoch [12] of 2 \[#{24}\] 16/16 \| [0-9]+ samples/s \| loss [0-9.]+ \| ETA 0:00' <<<"$screen")" = 2 ] \
  || fail "the bars' final states (16/16) from rank 0"
grep -qE '\[rank[0-9]\].*\[rank[0-9]\]' <<<"$screen" && fail "a torn line: two tags on one screen line"
grep -q '^\[rank0\]: epoch 2/2 | train loss' <<<"$screen" || fail "epoch summary missing on the terminal"
updates=$(grep -ao '\[rank0\]: epoch 1 of 2 \[' "$work/typescript" | wc -l)
[ "$updates" -ge 4 ] || fail "the bar was drawn $updates time(s) in epoch 1; expected it updated in place (>= 4)"
grep -aq '\[rank1\]: epoch 1 of 2' "$work/typescript" && fail "rank 1 drew a bar"
echo "bar of epoch 1 drawn $updates times in place"
echo PASS
